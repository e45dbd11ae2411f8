"""One bad field does not refuse a whole session: the record holding it is left out, by name.

An importer turns records (JSONL lines, the messages of a JSON document, OpenCode's stored
files and rows) into messages, trusting their shapes: ``message.content`` a list, a tool
call's ``name`` a string. In an untrusted file any one of them may be any JSON value, and
one such value used to refuse the whole session with a validation dump. Fixing the ~40
places that trust a shape, importer by importer, would still leave the next one; so this is
done once, around every importer:

* While ``load`` runs, the readers hand out each record as a ``Record`` (a ``dict`` that
  knows its name: ``line 12``, ``messages[3]``, ``part/msg_002/prt_004.json``).
* When the importer raises on the data (``TypeError``, ``AttributeError``, ``LookupError``,
  ``ValueError`` — a pydantic error is one — or ``ArithmeticError``), the innermost frame of
  the traceback holding a ``Record`` names the record being converted. The load runs again
  with that record reduced to its top-level scalars (ids, parent links, type, timestamps:
  a Claude Code or Qwen chain still walks through it); if that still fails, without it.
  At most ``MAX_RECORDS`` records are left out; past that the session is refused as before.
* A metadata field of the wrong type (a session's ``title``, ``model`` or ``cwd``, a message's
  ``name`` or ``timestamp``, a usage count) is dropped by the models' validators, not the
  record.

What was left out travels with the session: records in ``ImportStats.skipped`` (the
``incomplete`` caveat of every verdict names them), dropped fields in its warnings.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from replayer.core.errors import ReplayerError

#: records a session may lose before it is refused whole: more is not "one bad field"
MAX_RECORDS = 16
#: what an importer raises on a value of the wrong shape
DATA_ERRORS = (TypeError, AttributeError, LookupError, ValueError, ArithmeticError)


class Record(dict):
    """A record as an importer reads it, carrying its name for the note if it must be left out."""

    __slots__ = ("label", "seq")

    def __init__(self, data: dict, label: str, seq: int = 0) -> None:
        super().__init__(data)
        self.label, self.seq = label, seq


@dataclass
class _Attempt:
    """What the current load leaves out: label → 1 (scalars only) or 2 (the whole record)."""

    level: dict[str, int] = field(default_factory=dict)
    seq: int = 0  # records handed out so far: the latest one in a frame is the one being converted
    skipped: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


_state: ContextVar[_Attempt | None] = ContextVar("replayer_salvage", default=None)


def active() -> bool:
    return _state.get() is not None


def admit(obj: Any, label: str) -> Any:
    """The record as this load reads it: itself (named), its scalars, or None (left out). Outside
    a load (detection, listings) the object itself."""
    st = _state.get()
    if st is None or not isinstance(obj, dict):
        return obj
    level = st.level.get(label, 0)
    if level >= 2:
        return None
    if level == 1:
        obj = {k: v for k, v in obj.items() if v is None or isinstance(v, (str, int, float, bool))}
    st.seq += 1
    # its objects one level down named too: a converter is handed ``r["message"]`` or
    # ``r["payload"]``, and the record itself may be held only by a frame further out
    return Record({k: Record(v, label, st.seq) if isinstance(v, dict) else v for k, v in obj.items()}, label, st.seq)


def admit_all(items: list, prefix: str) -> list:
    """The dict items of a document's list, each named ``prefix[i]``; left-out ones removed.
    An item that is not an object, among objects, is left out with a note."""
    if not active() or not any(isinstance(x, dict) for x in items):
        return items
    out = []
    for i, x in enumerate(items):
        if not isinstance(x, dict):
            skip(f"{prefix}[{i}]", f"{type(x).__name__}, not an object")
            continue
        r = admit(x, f"{prefix}[{i}]")
        if r is not None:
            out.append(r)
    return out


def skip(record: Any, why: str) -> None:
    """An importer leaves a record out (it lacks a field its format needs): named in the caveat."""
    st = _state.get()
    label = record if isinstance(record, str) else getattr(record, "label", None)
    if st is not None and label is not None and not any(x.startswith(f"{label} (") for x in st.skipped):
        st.skipped.append(f"{label} ({why})")


def note_dropped(text: str) -> None:
    st = _state.get()
    if st is not None and text not in st.dropped:
        st.dropped.append(text)


def first_error(exc: BaseException) -> str:
    """One line for what went wrong: a pydantic error's first field, not its whole dump."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first, n = errors()[0], exc.error_count()  # type: ignore[attr-defined]
            where = ".".join(str(x) for x in first.get("loc", ())) or "?"
            more = f" and {n - 1} more" if n > 1 else ""
            return f"field {where}: {first.get('msg', 'invalid')}{more}"[:200]
        except (IndexError, AttributeError, TypeError):
            pass
    return f"{type(exc).__name__}: {exc}"[:200]


def _blame(exc: BaseException) -> str | None:
    """The record the importer was converting: in the innermost frame with a ``Record`` in hand,
    the one read last (a loader's frame also holds the header it read first)."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        held = [v for v in frame.f_locals.values() if isinstance(v, Record)]
        if held:
            return max(held, key=lambda r: r.seq).label
    return None


def load(run: Callable[[], Any]) -> Any:
    """``run()`` (an importer's load), again without each record it fails on; the session it
    returns carries what was left out."""
    st = _Attempt()
    token = _state.set(st)
    try:
        while True:
            try:
                s = run()
                break
            except ReplayerError:
                raise
            except DATA_ERRORS as exc:
                label, why = _blame(exc), first_error(exc)
                if label is None or st.level.get(label, 0) >= 2 or len(st.level) >= MAX_RECORDS + 1:
                    raise
                if label not in st.level:
                    st.skipped.append(f"{label} ({why})")
                st.level[label] = st.level.get(label, 0) + 1
                del exc
    finally:
        _state.reset(token)
    if len(st.skipped) > MAX_RECORDS:
        raise ValueError(f"more than {MAX_RECORDS} records could not be read")
    s.stats.skipped = st.skipped
    s.warnings.extend(st.dropped)
    return s


def validate(cls: type, data: Any, handler: Callable[[Any], Any], droppable: frozenset[str]) -> Any:
    """A model's wrap validator during an import: a ``droppable`` field of the wrong type is
    left out (its default) with a note, instead of failing the record."""
    try:
        return handler(data)
    except ValidationError as exc:
        if not active() or not isinstance(data, dict):
            raise
        bad = {e["loc"][0] for e in exc.errors() if e.get("loc") and e["loc"][0] in droppable}
        if not bad or any(not e.get("loc") or e["loc"][0] not in bad for e in exc.errors()):
            raise
        for e in exc.errors():
            note_dropped(f"left out a {cls.__name__.lower()}'s {e['loc'][0]} "
                         f"({type(e.get('input')).__name__}: {e.get('msg', 'invalid')})")
        return handler({k: v for k, v in data.items() if k not in bad})
