"""The importer registry: each format module declares one ``Importer``; detection and loading ask them all.

A format is a module in this package with ``IMPORTER = Importer(name, detect, load)``:
``detect(head) -> confidence`` (0 = not this format, 1 = certain) looks only at the
``Head`` (first bytes, first JSON lines, the whole document when small), and
``load(path, options)`` imports the file read-only. Modules are found by scanning the
package, so a new format is one new module and no edit elsewhere. Detectors read
untrusted data and must return 0 for anything they do not understand, never raise.
"""

from __future__ import annotations

import os
import pkgutil
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import import_module
from pathlib import Path
from typing import Any, Callable

import orjson

from replayer.core.errors import FormatUnknown, ImportFailed, ReplayerError, did_you_mean
from replayer.core.session import salvage
from replayer.core.session.model import Session
from replayer.core.session.reader import UTF8_BOM, JsonlFile, check_readable_file, head_objects, loads

HEAD_BYTES = 65536
HEAD_OBJECTS = 20
WHOLE_JSON_LIMIT = 64 * 1024 * 1024
#: leading whitespace, as ``str.lstrip``/``bytes.lstrip`` strip it (``\s`` is ``isspace`` in both)
_LEAD = re.compile(r"\s*")
_LEAD_B = re.compile(rb"\s*")
_NOT_SPACE_B = re.compile(rb"\S")


@dataclass(frozen=True)
class LoadOptions:
    images: str = "omit"  # omit | placeholder | keep
    session_id: str | None = None  # a database holding several sessions
    thread: str | None = None  # a subagent thread inside the file (a Claude Code 1.0.x sidechain's root uuid)
    once: JsonlFile | None = None  # the file already parsed, for an importer that reads it whole (read_records)


@dataclass(frozen=True)
class Importer:
    name: str
    detect: Callable[["Head"], float]
    load: Callable[[Path, LoadOptions], Session]


def is_one_of(value: Any, names: set[str] | frozenset[str] | tuple[str, ...]) -> bool:
    """``value in names`` for a field of an untrusted record (a list there must not raise)."""
    return isinstance(value, str) and value in names


class Head:
    """What detection may look at, read once per file and only as far as asked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.is_dir = path.is_dir()
        self.bytes = b""
        if not self.is_dir:
            check_readable_file(path)
            with open(path, "rb") as fh:  # read(n) allocates n: a 200-byte file reads 201, not 64 KB
                size = os.fstat(fh.fileno()).st_size
                self.bytes = fh.read(min(HEAD_BYTES, size + 1) if size else HEAD_BYTES).removeprefix(UTF8_BOM)

    @cached_property
    def text(self) -> str:
        return self.bytes.decode("utf-8", errors="replace")

    @property
    def is_binary(self) -> bool:
        if b"\x00" in self.bytes:
            return True
        try:
            self.bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            return exc.start < len(self.bytes) - 4  # a cut multibyte char at the end is fine
        return False

    @cached_property
    def _text_span(self) -> tuple[int, int]:
        """Where ``text.strip()`` starts and ends, found without the copies ``strip`` makes (each as
        large as the head: four of them were most of a small file's detection)."""
        text = self.text
        start, end = _LEAD.match(text).end(), len(text)
        while end > start and text[end - 1].isspace():
            end -= 1
        return start, end

    @property
    def looks_json(self) -> bool:
        start = self._text_span[0]
        return self.text[start:start + 1] in ("{", "[")

    @cached_property
    def objs(self) -> list[dict[str, Any]]:
        """The first JSON object lines (JSONL formats)."""
        return head_objects(self.path, HEAD_OBJECTS) if self.looks_json and not self.is_dir else []

    @cached_property
    def jsonl_like(self) -> bool:
        """Several object lines: a JSONL log, which no whole-document format can be."""
        return len(self.objs) >= 2 or (bool(self.objs) and self.text.find("\n", *self._text_span) >= 0)

    @property
    def several_values(self) -> bool:
        """The first line is a whole JSON value and more follows: JSON lines, never one document
        (decided from the head, without reading a large log whole)."""
        data = self.bytes
        start = _LEAD_B.match(data).end()
        nl = data.find(b"\n", start)
        if nl < 0 or not _NOT_SPACE_B.search(data, nl + 1):
            return False
        try:
            loads(data[start:nl])
        except orjson.JSONDecodeError:
            return False
        return True

    @cached_property
    def doc(self) -> Any:
        """The whole file as one JSON document; None for JSON lines, non-JSON or a file over 64 MiB."""
        if self.is_dir or not self.looks_json or self.several_values or \
                self.path.stat().st_size > WHOLE_JSON_LIMIT:
            return None
        try:
            return whole_json(self.path)
        except (orjson.JSONDecodeError, ImportFailed):
            return None


def jsonl_confidence(head: Head, detect: Callable[[list[dict[str, Any]]], bool], confidence: float) -> float:
    """``confidence`` when the head's object lines are this JSONL format's (shared by pi, Codex, Claude Code)."""
    if not head.objs or not (head.jsonl_like or head.doc is None):
        return 0.0
    return confidence if detect(head.objs) else 0.0


def mostly(items: Any, ok: Callable[[Any], bool]) -> bool:
    """A list of a format's records but for a few that lack a field it needs (a hand-edited or
    damaged file): fewer bad than good and no more than ``salvage.MAX_RECORDS``.
    The importer leaves the bad ones out by name, so one broken record does not hide the format."""
    if not isinstance(items, list):
        return False
    bad = 0
    for x in items:
        if not ok(x):
            bad += 1
            if bad > salvage.MAX_RECORDS:
                return False
    return 2 * bad < len(items) or not items  # an empty list: the importer says so, naming it


def doc_confidence(head: Head, detect: Callable[[Any], bool], confidence: float) -> float:
    """``confidence`` when the whole document is this format's (web-UI export, OpenAI body, ShareGPT)."""
    return confidence if head.doc is not None and detect(head.doc) else 0.0


def whole_json(path: Path) -> Any:
    """A whole-document session read bounded (``WHOLE_JSON_LIMIT``), a byte-order mark allowed."""
    from replayer.core.textfile import read_bytes

    try:
        data = read_bytes(path, "session", WHOLE_JSON_LIMIT)
    except ReplayerError as exc:
        raise ImportFailed(str(exc)) from None
    doc = loads(data.removeprefix(UTF8_BOM))  # orjson's reading, not its 10–35× buffer
    if salvage.active():  # an import: each item of the document's lists named, to be left out by name
        if isinstance(doc, list):
            doc = salvage.admit_all(doc, "item")
        elif isinstance(doc, dict):
            doc = {k: salvage.admit_all(v, k) if isinstance(v, list) else v for k, v in doc.items()}
    return doc


def read_doc(path: Path, detect: Callable[[Any], bool], what: str) -> Any:
    """The whole JSON document of a forced format, refused when it is not that format."""
    try:
        doc = whole_json(path)
    except orjson.JSONDecodeError as exc:
        raise ImportFailed(f"{path} is not valid JSON: {exc}") from None
    if not detect(doc):
        raise ImportFailed(f"{path} is not {what}")
    return doc


_registry: dict[str, Importer] | None = None


def importers() -> dict[str, Importer]:
    """Every format module's importer by name, found by scanning ``session/formats`` once."""
    global _registry
    if _registry is None:
        pkg = import_module(__name__.rpartition(".")[0] + ".formats")
        found: dict[str, Importer] = {}
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            imp = getattr(import_module(f"{pkg.__name__}.{info.name}"), "IMPORTER", None)
            if isinstance(imp, Importer):
                found[imp.name] = imp
        _registry = found
    return _registry


def reset() -> None:
    """Scan again on next use (a test that adds a format module)."""
    global _registry
    _registry = None


def names() -> list[str]:
    return list(importers())


def importer(name: str) -> Importer:
    table = importers()
    if name not in table:
        hint = did_you_mean(name, list(table))
        raise ImportFailed(f"unknown format {name!r}; choose one of {', '.join(table)}",
                           hint=f"did you mean {hint}?" if hint else None)
    return table[name]


def _best(head: Head) -> str | None:
    best, score = None, 0.0
    for name, imp in importers().items():
        c = imp.detect(head)
        if c > score:
            best, score = name, c
    return best


def check_forced(path: Path, name: str) -> None:
    """Refuse a forced format that the content contradicts: one that does not recognise the file
    while another one does (a pi log read as Aider markdown would import as assistant text).
    A file no importer recognises is left to the forced one: forcing exists for those."""
    head = Head(path)
    if importer(name).detect(head) > 0:
        return
    found = _best(head)
    if found is not None and found != name:
        raise ImportFailed(f"--format {name} does not fit {path}: it is a {found} file",
                           hint="leave out --format to import it as detected")


def detect(path: Path) -> str:
    """The format whose importer is most confident about ``path`` (ties: the name first in order)."""
    head = Head(path)
    best = _best(head)
    if best is not None:
        return best
    if head.is_dir:
        raise ImportFailed(f"{path} is a directory, not a session file",
                           hint="give a session file, or an OpenCode storage folder")
    if head.bytes[:16] == b"SQLite format 3\x00":
        raise FormatUnknown(f"{path} is an SQLite database without the session tables of OpenCode, Kilo, Crush or Goose",
                            hint="give an agent's session database (opencode.db, kilo.db, .crush/crush.db, sessions.db)")
    if head.is_binary:
        raise FormatUnknown(f"{path} is a binary file, not a session log")
    why = _why_unknown(head)
    raise FormatUnknown(f"cannot tell which agent wrote {path}" + (f": {why}" if why else ""),
                        hint=f"supported: {', '.join(importers())}; force one with --format")


#: the fields that tell a JSON document's format, for the refusal of one that has none of them
_DOC_FIELDS = ('"messages" (OpenAI body, llama.cpp web UI, Cline) or "conversations" (ShareGPT), '
               "a list of role-keyed objects")


#: the first statements of an SQL text dump (``sqlite3 DB .dump``), such as a shared ``opencode.db``
_SQL_DUMP = re.compile(r"\s*(?:--[^\n]*\n\s*)*(?:PRAGMA|BEGIN TRANSACTION|CREATE TABLE)\b", re.IGNORECASE)


def _why_unknown(head: Head) -> str | None:
    """The field that would have told the format, named for the one-line refusal."""
    if not head.looks_json and _SQL_DUMP.match(head.text):
        return ("it is an SQL text dump, not a database; OpenCode's opencode.db is read as the database "
                "itself: load the dump with `sqlite3 opencode.db < FILE` and give the .db")
    doc = head.doc
    what = "a JSON object"
    if isinstance(doc, list):
        doc, what = next((x for x in doc if isinstance(x, dict)), None), "a JSON list whose first object is one"
        if doc is None:
            return f"a JSON list with no object in it; a session file needs {_DOC_FIELDS}"
    if isinstance(doc, dict):
        for key in ("messages", "conversations"):
            if key in doc:
                v = doc[key]
                what = (f"a list of {len(v)} item(s), too few of them objects with a known role"
                        if isinstance(v, list) else type(v).__name__)
                return f'its "{key}" is {what}'
        return f"{what} without {_DOC_FIELDS}"
    if head.objs:
        t = head.objs[0].get("type")
        return (f'its first record\'s "type" is {str(t)[:40]!r}' if t is not None else
                'its first record has no "type"') + (
            ' (pi\'s header: "session" with an "id"; Codex\'s: "session_meta"; '
            'Claude Code\'s and Qwen\'s records: a "sessionId" and a "uuid")')
    return None
