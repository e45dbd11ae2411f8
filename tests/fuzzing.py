"""Mutated session files for fuzzing detection (the suite) and loading (``benchmarks/fuzz_sessions.py``).

Every fixture session is mutated in one of three ways: a JSON value somewhere in one
record replaced by another JSON value of any type (or its key dropped), bytes flipped,
inserted or deleted, or the file cut short. The checks say what must hold for any input:
detection returns a format or one ``ReplayerError``, and every importer's ``detect``
returns a confidence without raising.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import strategies as st

from replayer.core.errors import ReplayerError
from replayer.core.session import load_session, registry

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SKIP = {".py", ".db"}  # the SQLite database is detected by its magic alone


def corpus(extra: list[Path] = ()) -> list[tuple[str, bytes]]:
    files = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.suffix not in SKIP
             and "__pycache__" not in p.parts]
    return [(str(p.relative_to(p.parents[1])), p.read_bytes()) for p in [*files, *extra]]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)


def _paths(obj: Any, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    out = [prefix] if prefix else []
    if depth >= 6:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,), depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:8]):
            out += _paths(v, prefix + (i,), depth + 1)
    return out


def _set(obj: Any, path: tuple, value: Any, drop: bool) -> None:
    for key in path[:-1]:
        obj = obj[key]
    if drop and isinstance(obj, dict):
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def _mutate_json(data: bytes, draw) -> bytes | None:
    lines = data.split(b"\n")
    try:  # one document, or one record of a JSONL file
        doc = orjson.loads(data)
        target, lineno = doc, None
    except orjson.JSONDecodeError:
        candidates = [i for i, ln in enumerate(lines) if ln.strip()]
        if not candidates:
            return None
        lineno = draw(st.sampled_from(candidates))
        try:
            target = orjson.loads(lines[lineno])
        except orjson.JSONDecodeError:
            return None
    paths = _paths(target)
    if not paths:
        return None
    path = draw(st.sampled_from(paths))
    _set(target, path, draw(json_values), draw(st.booleans()))
    if lineno is None:
        return orjson.dumps(target)
    lines[lineno] = orjson.dumps(target)
    return b"\n".join(lines)


@st.composite
def mutated_sessions(draw, files: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    name, data = draw(st.sampled_from(files))
    kind = draw(st.sampled_from(["value", "value", "bytes", "cut"]))
    if kind == "value":
        out = _mutate_json(data, draw)
        if out is not None:
            return name, out
    if kind == "cut":
        return name, data[:draw(st.integers(0, len(data)))]
    pos = draw(st.integers(0, len(data)))
    op = draw(st.sampled_from(["flip", "insert", "delete"]))
    if op == "insert":
        return name, data[:pos] + draw(st.binary(min_size=1, max_size=8)) + data[pos:]
    if op == "delete":
        return name, data[:pos] + data[pos + draw(st.integers(1, 64)):]
    if pos == len(data):
        return name, data + b"\xff"
    return name, data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1:]


def check_detection(path: Path) -> str | None:
    """Every importer rates the file without raising; detection names a format or says why not."""
    try:
        head = registry.Head(path)
    except ReplayerError:
        return None
    for imp in registry.importers().values():
        c = imp.detect(head)
        assert isinstance(c, float) and 0.0 <= c <= 1.0, (imp.name, c)
    del head  # detection reads the file once more: two parsed documents are the harness's, not replayer's
    try:
        return registry.detect(path)
    except ReplayerError:
        return None


def check_loading(path: Path, fmt: str) -> None:
    """Loading a detected file imports it or raises one ``ReplayerError``."""
    try:
        load_session(path, fmt)
    except ReplayerError:
        pass


# -- OpenCode storage folders, GGUF headers, templates (issue 24) ---------------------------

#: ids a hostile storage folder may hold: traversal, absolute, over-long, odd characters
HOSTILE_IDS = ["../../outside", "/etc", "..", ".", "", "a/b", "s" * 5000, "ses_\x00x", "msg_ü", "../outside/leak",
               None, 5, ["x"]]
#: what a traversal would read: a file beside the storage folder whose text must never be imported
PLANTED = "PLANTED-OUTSIDE-SECRET"


def storage_files() -> dict[str, bytes]:
    root = FIXTURES / "opencode" / "storage"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.json"))}


@st.composite
def mutated_storage(draw, files: dict[str, bytes]) -> dict[str, bytes]:
    """The storage fixture with one record mutated, or one id replaced by a hostile one."""
    out = dict(files)
    name = draw(st.sampled_from(sorted(files)))
    if draw(st.booleans()):
        doc = orjson.loads(files[name])
        doc["id"] = draw(st.sampled_from(HOSTILE_IDS))
        out[name] = orjson.dumps(doc)
    else:
        out[name] = draw(mutated_sessions([(name, files[name])]))[1]
    return out


def write_storage(work: Path, files: dict[str, bytes]) -> Path:
    """The folder ``work/data/storage`` holding ``files``, with the planted file beside it."""
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    root = work / "data" / "storage"
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (work / "outside").mkdir(exist_ok=True)
    (work / "outside" / "leak.json").write_bytes(orjson.dumps({"id": "msg_x", "role": "user", "text": PLANTED}))
    return root


def check_storage(root: Path) -> None:
    """A storage folder imports (never with text from outside it) or raises one ``ReplayerError``."""
    try:
        s = load_session(root)
    except ReplayerError:
        return
    assert PLANTED not in s.model_dump_json(), "read a file outside the storage folder"


@st.composite
def mutated_gguf(draw, data: bytes) -> bytes:
    """A GGUF with its header damaged: a count set huge, bytes flipped in the first KB, or cut."""
    import struct

    kind = draw(st.sampled_from(["count", "flip", "cut"]))
    if kind == "count":
        off = draw(st.sampled_from([8, 16]))
        value = draw(st.sampled_from([0, 1, 10**6, 2**32, 2**63]) | st.integers(0, 2**64 - 1))
        return data[:off] + struct.pack("<Q", value) + data[off + 8:]
    if kind == "cut":
        return data[:draw(st.integers(0, min(len(data), 8192)))]
    pos = draw(st.integers(0, min(len(data), 1024) - 1))
    return data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1:]


def check_gguf(path: Path) -> None:
    """Both GGUF readers: the model profile's (``gguf.GGUFReader`` behind header checks) and the
    tokenizer's bounded key-value reader; each reads or raises one ``ReplayerError``."""
    from replayer.core.hardware import gguf_model
    from replayer.core.prompt import gguf_kv

    gguf_model._read.cache_clear()
    try:
        gguf_model.read(path)
    except ReplayerError:
        pass
    try:
        gguf_kv.read(path).close()
    except ReplayerError:
        pass


def template_sources() -> list[str]:
    root = Path(__file__).resolve().parent.parent / "replayer" / "data" / "templates"
    return [p.read_text() for p in sorted(root.glob("*.jinja"))]


@st.composite
def mutated_templates(draw, sources: list[str]) -> str:
    """A bundled template with characters flipped, inserted or cut, or a hostile construct inserted."""
    src = draw(st.sampled_from(sources))
    pos = draw(st.integers(0, len(src)))
    kind = draw(st.sampled_from(["insert", "delete", "cut", "hostile"]))
    if kind == "cut":
        return src[:pos]
    if kind == "delete":
        return src[:pos] + src[pos + draw(st.integers(1, 32)):]
    if kind == "hostile":
        n = draw(st.integers(1, 3000))
        piece = draw(st.sampled_from(["{{ " + "(" * n + "1" + ")" * n + " }}", "{{ " + "[" * n + " }}",
                                      "{% for i in range(99999999) %}x{% endfor %}", "{{ ''.__class__ }}",
                                      "{{ 'a' * 999999999 }}", "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"]))
        return src[:pos] + piece + src[pos:]
    return src[:pos] + draw(st.text(max_size=8)) + src[pos:]


MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]


def check_template(source: str) -> None:
    """An untrusted template renders or raises one ``ReplayerError``."""
    from replayer.core.prompt import templates

    try:
        templates.render(templates.Template(name="fuzz.jinja", source=source), MSGS)
    except ReplayerError:
        pass


def replay_report(path: Path, fmt: str) -> None:
    """A replay of the file and its text report, whole or not (the fuzz run's warm-up: a format's
    first replay imports the replay's modules and fills its caches, the process's cost)."""
    from replayer.core.compare import compare
    from replayer.core.replay import ReplayConfig, all_simulated, prepare, report

    try:
        prep = prepare(str(path), ReplayConfig(format=fmt))
    except ReplayerError:
        return
    report(prep, compare(all_simulated(prep)), "text")


def check_incomplete_note(path: Path, fmt: str) -> bool | None:
    """For a loaded session read in part: does the replay's text report carry the caveat?
    None when the session loads whole (or not at all)."""
    from replayer.core.compare import compare
    from replayer.core.replay import ReplayConfig, all_simulated, prepare, report

    try:
        s = load_session(path, fmt)
    except ReplayerError:
        return None
    note = s.incomplete
    del s  # the replay reads the file itself: this copy is not to be measured against the case
    if note is None:
        return None
    try:
        prep = prepare(str(path), ReplayConfig(format=fmt))
    except ReplayerError:
        return None
    text = report(prep, compare(all_simulated(prep)), "text").decode()
    return note in text
