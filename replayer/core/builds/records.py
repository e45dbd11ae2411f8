"""The build cache's records: what is installed, found by number, label or identity.

Every entry of ``paths.builds_dir()`` holds a ``build.json`` (``BuildRecord``); ``manager``
writes them, everything else reads them here. A release number always names a release; a
source build (a tree, a git ref, a release with patches) is named by its label or identity, and
runs as the rules its own source follows (``source_rules``, kept in the record).
"""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel

from replayer.core import paths
from replayer.core.builds.catalog import GENERATIONS, Build, parse_build
from replayer.core.errors import ReplayerError


class BuildRecord(BaseModel):
    """What ``builds list`` shows and what the live engine needs to start a server."""

    build: int
    backend: str
    binary: str
    source: str  # "sdist", "local" or "source" (a tree, a git ref or a release with patches)
    label: str | None = None  # a source build's name: b9934+fix, 1a2b3c4d5, 1a2b3c4d5+local
    identity: str | None = None  # a source build's hash of its source (commit, local changes, patches)
    origin: dict | None = None  # where a source build's tree came from
    generation: str | None = None  # the rules its source follows (source_rules); None: live only
    cmake_args: list[str] = []
    sdist_sha256: str | None = None
    build_seconds: float | None = None
    created: float
    key: str
    compiler: str | None = None
    entry: str  # directory name under builds_dir()

    @property
    def binary_path(self) -> Path:
        return Path(self.binary)


def record_path(entry: Path) -> Path:
    return entry / "build.json"


def read_record(entry: Path) -> BuildRecord | None:
    """An entry's record; None when absent, foreign or damaged (never an exception)."""
    f = record_path(entry)
    if not f.is_file():
        return None
    try:
        return BuildRecord.model_validate(orjson.loads(f.read_bytes()))
    except Exception:
        return None


def write_record(entry: Path, rec: BuildRecord) -> None:
    record_path(entry).write_bytes(orjson.dumps(rec.model_dump(), option=orjson.OPT_INDENT_2))


def list_builds() -> list[BuildRecord]:
    root = paths.builds_dir()
    if not root.is_dir():
        return []
    recs = (read_record(entry) for entry in sorted(root.iterdir()) if entry.is_dir())
    return sorted((r for r in recs if r is not None), key=lambda r: (r.build, r.backend, r.source))


def damaged_records() -> list[str]:
    """One line per cache entry whose ``build.json`` exists but does not read as a record, so
    ``builds list`` can say so instead of leaving the build out without a word."""
    root = paths.builds_dir()
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(root.iterdir()):
        f = record_path(entry)
        if entry.is_dir() and f.is_file() and read_record(entry) is None:
            out.append(f"{entry.name}: its build record {f} is damaged; the build is left out "
                       f"(remove {entry} and install it again)")
    return out


def installed_backends() -> dict[int, list[str]]:
    """Installed release numbers → their backends; empty when the cache cannot be read (a
    damaged build cache must not keep the app from starting). A source build is not here: its
    number is a commit count or the release it patched, and a number names a release."""
    out: dict[int, list[str]] = {}
    try:
        for rec in list_builds():
            if rec.source != "source" and rec.backend not in out.get(rec.build, ()):
                out.setdefault(rec.build, []).append(rec.backend)
    except (OSError, ValueError):
        return {}
    return out


def installed_sources() -> list[BuildRecord]:
    """The installed source builds (by label: what ``named_build`` resolves), or none when the
    cache cannot be read."""
    try:
        return [rec for rec in list_builds() if rec.source == "source"]
    except (OSError, ValueError):
        return []


def find_build(build: int, backend: str | None = None) -> BuildRecord | None:
    """The installed release ``build`` (a number names a release, never a source build)."""
    for rec in list_builds():
        if rec.build == build and rec.source != "source" and (backend is None or rec.backend == backend):
            if Path(rec.binary).exists():
                return rec
    return None


def find_source_build(text: str, backend: str | None = None) -> BuildRecord | None:
    """An installed source build by its label, its identity (6+ characters of it) or its entry."""
    t = text.strip()
    if not t:
        return None
    try:
        recs = [r for r in list_builds() if r.source == "source" and (backend is None or r.backend == backend)]
    except (OSError, ValueError):
        return None
    for rec in recs:
        if t in (rec.label, rec.entry) or (len(t) >= 6 and (rec.identity or "").startswith(t.removeprefix("src:"))):
            return rec if Path(rec.binary).exists() else None
    return None


def source_build(rec: BuildRecord, live: bool = False) -> Build:
    """A source build's record as the scheduler sees it: the rules its source follows
    (``source_rules``). One whose rules match no generation cannot be simulated; a live run of it
    labels its batches by the latest generation's rules, and says so in its note."""
    gen = next((g for g in GENERATIONS if g.name == rec.generation), None)
    origin = rec.origin or {}
    base = f"b{origin['release']}" if origin.get("release") else origin.get("commit", "")[:9] or "a tree"
    note = f"source build of {base}; rules read from its source"
    if gen is None:
        if not live:
            raise ReplayerError(f"{rec.label}: its prefill rules match no known generation, so it cannot be "
                                "simulated; replay it with --engine live")
        gen, note = GENERATIONS[-1], (f"source build of {base}; its rules match no known generation "
                                      f"(batch reasons labelled as {GENERATIONS[-1].name})")
    return Build(gen, rec.build if rec.build > 0 else None, note, name=rec.label)


def named_build(text: str) -> Build:
    """``catalog.parse_build``, or else an installed source build by its label or identity."""
    try:
        return parse_build(text)
    except ReplayerError:
        rec = find_source_build(text)
        if rec is None:
            raise
        return source_build(rec)
