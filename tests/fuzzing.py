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
