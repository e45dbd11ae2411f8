"""A build's own ``llama-server --help``: its flags and the defaults of the settings that shape slots and caches.

Defaults move between builds (``-cms`` was 256, then 8192; ``--cache-idle-slots`` appeared
later than ``--cache-ram``), so they are never constants here: each build's help is read
once and its defaults kept in ``replayer/data/server_help.json`` (shipped, refreshed by
``benchmarks/server_defaults.py`` for every installed build) or, for a build
installed later, in the user's cache. A build with no help at hand takes the help of its
generation's representative build (the catalog's), and says so.

The help's layout (``common/arg.cpp``'s ``common_params_print_usage``): an entry starts at
column 0 with its comma-separated names and an optional value name, its description starts
at column 40 (on the next line when the names are longer), continuation lines are indented
by 40 columns.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replayer.core.builds.catalog import parse_build
from replayer.core.errors import ReplayerError
from replayer.core.paths import cache_dir

__all__ = ["SETTINGS", "HelpEntry", "ServerHelp", "parse_help", "help_for", "refresh", "SHIPPED"]

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "server_help.json"
_COLUMN = 40
_MAX_HELP_CHARS = 1_000_000  # a real help is ~40 kB; a binary that prints more is not llama-server

#: setting → (the help's long flag, its type): the settings slots and caches depend on.
SETTINGS: dict[str, tuple[str, str]] = {
    "n_parallel": ("--parallel", "int"),
    "kv_unified": ("--kv-unified", "bool"),
    "cache_ram_mib": ("--cache-ram", "int"),
    "cache_idle_slots": ("--cache-idle-slots", "bool"),
    "n_ctx_checkpoints": ("--ctx-checkpoints", "int"),
    "checkpoint_min_step": ("--checkpoint-min-step", "int"),
    "slot_prompt_similarity": ("--slot-prompt-similarity", "float"),
    "n_ctx": ("--ctx-size", "int"),
    "n_batch": ("--batch-size", "int"),
    "n_ubatch": ("--ubatch-size", "int"),
    "swa_full": ("--swa-full", "bool"),
    "cache_reuse": ("--cache-reuse", "int"),
    "models_max": ("--models-max", "int"),
    "sleep_idle_seconds": ("--sleep-idle-seconds", "int"),
}

_NEGATIVE = re.compile(r"^--?no-?[a-z]")
_DEFAULT = re.compile(r"\(default:\s*([^)]*)")
_ENV = re.compile(r"\(env: (\w+)\)")


@dataclass(frozen=True)
class HelpEntry:
    """One option of the help: its names (positive first, then any ``--no-…`` forms) and value name."""

    names: tuple[str, ...]
    arg: str | None = None
    text: str = ""
    env: str | None = None  # its environment variable (a preset INI may use it as a key)

    @property
    def negatives(self) -> tuple[str, ...]:
        """The names that turn a boolean option off (``--no-kv-unified``, ``-nocb``)."""
        pos = [n for n in self.names if not _NEGATIVE.match(n) and not n.startswith("-no")]
        return tuple(n for n in self.names if n not in pos) if pos else ()


@dataclass
class ServerHelp:
    """What one build's help says: every option by each of its names, and the settings' defaults."""

    build: int
    source: str  # "llama-server --help" of the binary, or the representative build it stands in for
    entries: list[HelpEntry]
    defaults: dict[str, Any] = field(default_factory=dict)
    by_name: dict[str, HelpEntry] = field(default_factory=dict, repr=False)
    by_env: dict[str, HelpEntry] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.by_name = {n: e for e in self.entries for n in e.names}
        self.by_env = {e.env: e for e in self.entries if e.env}
        if not self.defaults:
            self.defaults = _defaults(self.by_name)

    def supports(self, setting: str) -> bool:
        return SETTINGS[setting][0] in self.by_name

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "defaults": self.defaults,
                "flags": [[list(e.names), e.arg, e.env] for e in self.entries]}

    @classmethod
    def from_json(cls, build: int, d: dict[str, Any]) -> "ServerHelp":
        return cls(build, d["source"], [HelpEntry(tuple(n), a, "", env) for n, a, env in d["flags"]], dict(d["defaults"]))


def parse_help(text: str, build: int = 0, source: str = "llama-server --help") -> ServerHelp:
    """The entries of a ``--help`` text (any build's: the layout is ``arg.cpp``'s)."""
    entries: list[HelpEntry] = []
    names: list[str] | None = None
    arg: str | None = None
    desc: list[str] = []

    def close() -> None:
        if names:
            text = " ".join(desc)
            env = _ENV.search(text)
            entries.append(HelpEntry(tuple(names), arg, text, env.group(1) if env else None))

    for line in text[:_MAX_HELP_CHARS].splitlines():
        if line.startswith("-----") or not line.strip():
            continue
        if line.startswith("-"):
            close()
            head, tail = line, ""
            if len(line) > _COLUMN and line[_COLUMN - 1] == " " and line[_COLUMN] != " ":
                head, tail = line[:_COLUMN], line[_COLUMN:]
            names, arg = _names(head)
            desc = [tail.strip()] if tail.strip() else []
        elif names is not None and line.startswith(" "):
            desc.append(line.strip())
    close()
    if not entries:
        raise ReplayerError("not a llama-server --help text: no options found")
    return ServerHelp(build, source, entries)


def _names(head: str) -> tuple[list[str], str | None]:
    """``-c,    --ctx-size N`` → (["-c", "--ctx-size"], "N")."""
    parts = [p.strip() for p in head.strip().split(",") if p.strip()]
    names, arg = [], None
    for p in parts:
        words = p.split()
        names.append(words[0])
        if len(words) > 1:
            arg = " ".join(words[1:])
    return names, arg


def _defaults(by_name: dict[str, HelpEntry]) -> dict[str, Any]:
    """Each setting's default as the help states it; None when the build has no such option."""
    out: dict[str, Any] = {}
    for key, (flag, kind) in SETTINGS.items():
        e = by_name.get(flag)
        m = _DEFAULT.search(e.text) if e else None
        out[key] = _value(m.group(1), kind) if m else None
    return out


def _value(raw: str, kind: str) -> Any:
    """``8192, -1 - no limit`` → 8192; ``enabled if number of slots is auto`` → "auto"."""
    first = re.split(r"[,;]", raw)[0].strip().lower()
    if kind == "bool":
        if "auto" in first:
            return "auto"
        return first.startswith(("enabled", "true", "on"))
    try:
        return int(first) if kind == "int" else float(first)
    except ValueError:
        return first


# -- the helps at hand ----------------------------------------------------------------------

def _user_cache() -> Path:
    return cache_dir() / "server_help.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("builds", {})
    except (OSError, ValueError, AttributeError):
        return {}


#: help_for's reads, by (path, its size and mtime): a session replay asks for each build's help
#: once per run and fix priced, and parsing the ~100 kB file each time was ~3 % of a replay
_READS: dict[tuple[str, int, int], dict[str, ServerHelp]] = {}


def _known(path: Path, key: str, build: int) -> ServerHelp | None:
    """``ServerHelp.from_json`` of ``path``'s entry for ``key``, parsed once while the file is
    unchanged (a rewritten file has another size or mtime). The object is shared: read only."""
    try:
        st = path.stat()
    except OSError:
        return None
    stamp = (str(path), st.st_size, st.st_mtime_ns)
    helps = _READS.get(stamp)
    if helps is None:
        if len(_READS) > 8:
            _READS.clear()
        helps = _READS[stamp] = {}
    h = helps.get(key)
    if h is None:
        d = _read(path).get(key)
        if not d:
            return None
        h = helps[key] = ServerHelp.from_json(build, d)
    return h


def run_help(binary: Path, build: int, timeout: float = 30) -> ServerHelp:
    """Ask a binary for its help (reading the model is not needed: ``--help`` exits at once)."""
    try:
        out = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=timeout,
                             errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplayerError(f"{binary}: --help failed: {exc}") from exc
    return parse_help(out.stdout + out.stderr, build, f"b{build} llama-server --help")


def help_for(build: int | str, *, binary: Path | None = None, shipped: Path = SHIPPED) -> ServerHelp:
    """The help of ``build``: shipped, cached for the user, read from its binary, or its
    generation's representative build's (``source`` says which)."""
    b = parse_build(build)
    key = str(b.effective_number)
    for path in (shipped, _user_cache()):
        h = _known(path, key, b.effective_number)
        if h is not None:
            return h
    if binary is None:
        from replayer.core.builds.manager import find_build
        rec = find_build(b.effective_number)
        binary = rec.binary_path if rec else None
    if binary is not None and Path(binary).exists():
        h = run_help(Path(binary), b.effective_number)
        _store(_user_cache(), h)
        return h
    rep = b.generation.representative_build
    d = _read(shipped).get(str(rep))
    if d is None:
        raise ReplayerError(f"no llama-server --help known for b{b.effective_number}: install it, or the catalog's "
                            f"b{rep} of its generation {b.generation.value}")
    h = ServerHelp.from_json(b.effective_number, d)
    h.source = f"b{rep} llama-server --help (b{b.effective_number} not installed; its generation's representative)"
    return h


def _store(path: Path, h: ServerHelp) -> None:
    builds = _read(path)
    builds[str(h.build)] = h.to_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"builds": dict(sorted(builds.items(), key=lambda kv: int(kv[0])))}, indent=1)
                   + "\n", encoding="utf-8")
    tmp.replace(path)


def refresh(path: Path = SHIPPED) -> list[int]:
    """Read the help of every installed build into ``path`` (the shipped file by default)."""
    from replayer.core.builds.manager import list_builds
    done: list[int] = []
    for rec in list_builds():  # built from the build's sdist only: a local binary may be anything
        if rec.source == "sdist" and rec.build not in done and rec.binary_path.exists():
            _store(path, run_help(rec.binary_path, rec.build))
            done.append(rec.build)
    return sorted(done)

