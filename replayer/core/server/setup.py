"""The server setup a user runs: a real ``llama-server`` command line, or a router preset INI.

A setup is the build's own defaults (``help``) overridden by the user's flags, resolved the
way the server resolves them at start-up:

- ``-np -1`` (auto) becomes 4 slots with a unified KV cache, whatever ``--kv-unified`` says
  (``tools/server/server.cpp`` ``n_parallel is set to auto``, see docs/cache-rules.md);
- ``--cache-idle-slots`` needs ``--cache-ram``: with ``--cache-ram 0`` it is turned off
  (``server_context::init``);
- per-slot context: the whole ``-c`` with a unified cache, ``-c / -np`` without.

Flags the build's help does not know are refused with their names; flags replayer needs to
observe the server (host, port, log level, log file) are its own and the user's are dropped
with a note. A router preset takes ``[*]`` and then the model's section, under the command
line's own flags (the README's precedence: command line, model section, globals).
"""

from __future__ import annotations

import configparser
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replayer.core.errors import ReplayerError
from replayer.core.server.help import SETTINGS, ServerHelp

__all__ = ["ServerSetup", "parse_server_args", "from_preset", "OWNED_FLAGS"]

#: what replayer sets itself to observe the server (``live.LiveServer``): the user's are dropped
OWNED_FLAGS = ("--host", "--port", "--verbosity", "--log-file", "--log-verbose", "--log-disable")
_MAX_ARGS_CHARS = 100_000
_MAX_PRESET_BYTES = 1_000_000
_TRUE = {"true", "1", "on", "yes", "enabled"}
_FALSE = {"false", "0", "off", "no", "disabled"}


@dataclass
class ServerSetup:
    """One build's server as the user starts it: the resolved settings and the flags as given."""

    build: int
    help_source: str
    n_parallel: int
    kv_unified: bool
    cache_ram_mib: int  # -1 no limit, 0 off
    cache_idle_slots: bool
    n_ctx_checkpoints: int
    checkpoint_min_step: int
    slot_prompt_similarity: float
    n_ctx: int  # 0 = the model's training context
    n_batch: int
    n_ubatch: int
    swa_full: bool
    cache_reuse: int
    models_max: int | None = None
    sleep_idle_seconds: int | None = None
    model: str | None = None
    args: list[str] = field(default_factory=list)  # the command line's flags, replayer's own removed
    given: dict[str, Any] = field(default_factory=dict)  # the settings the user set
    notes: list[str] = field(default_factory=list)

    @property
    def n_ctx_slot(self) -> int | None:
        """Each slot's context (None while ``-c`` is the model's): the whole with a unified KV cache."""
        if not self.n_ctx:
            return None
        return self.n_ctx if self.kv_unified else self.n_ctx // max(1, self.n_parallel)

    @property
    def host_cache(self) -> bool:
        return self.cache_ram_mib != 0

    def label(self) -> str:
        """What the report names the setup by: the slots and caches in a few words."""
        ram = "no limit" if self.cache_ram_mib < 0 else f"{self.cache_ram_mib} MiB" if self.cache_ram_mib else "off"
        return (f"-np {self.n_parallel} ({'unified' if self.kv_unified else 'per-slot'} KV), --cache-ram {ram}"
                + (", idle slots cached" if self.cache_idle_slots else ""))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def parse_server_args(text: str | list[str], help: ServerHelp, *, preset: dict[str, str] | None = None
                      ) -> ServerSetup:
    """A ``llama-server`` command line (with or without the program name) on ``help``'s build."""
    if isinstance(text, str):
        if len(text) > _MAX_ARGS_CHARS:
            raise ReplayerError(f"--server-args: longer than {_MAX_ARGS_CHARS} characters")
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise ReplayerError(f"--server-args: {exc}") from None
    else:
        argv = list(text)
    if argv and not argv[0].startswith("-") and Path(argv[0]).name.startswith("llama-server"):
        argv = argv[1:]
    given: dict[str, Any] = {}
    kept: list[str] = []
    notes: list[str] = []
    unknown: list[str] = []
    model = None
    from_preset = _pairs(preset or {}, help)
    for i, (name, value, raw) in enumerate(from_preset + _argv_pairs(argv, help, unknown)):
        entry = help.by_name[name]
        long = _long(entry)
        if long in OWNED_FLAGS or any(n in OWNED_FLAGS for n in entry.names):
            notes.append(f"{raw[0]} is replayer's own (it observes the server on 127.0.0.1 with -lv 4): dropped")
            continue
        if long == "--model":
            model = value
        if i >= len(from_preset):  # the command line's own flags (a preset's stay in its file)
            kept += raw
        key = next((k for k, (flag, _) in SETTINGS.items() if flag in entry.names), None)
        if key is not None:
            given[key] = _convert(key, name, value, entry)
    if unknown:
        raise ReplayerError(f"b{help.build} llama-server does not know {', '.join(unknown)} "
                            f"(its --help: {help.source})")
    return _resolve(help, given, kept, model, notes)


def _long(entry) -> str:
    longs = [n for n in entry.names if n.startswith("--")]
    return longs[0] if longs else entry.names[0]


def _argv_pairs(argv: list[str], help: ServerHelp, unknown: list[str]) -> list[tuple[str, str | None, list[str]]]:
    """(name, value, the words as given) for each flag of ``argv``."""
    out = []
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        entry = help.by_name.get(name)
        if entry is None:
            unknown.append(word if word.startswith("-") else repr(word))
            i += 1
            while word.startswith("-") and i < len(argv) and not argv[i].startswith("-"):
                i += 1  # its value, as far as one can tell without knowing the flag
            continue
        if entry.arg and not eq:
            if i + 1 >= len(argv):
                raise ReplayerError(f"--server-args: {name} needs a value ({entry.arg})")
            out.append((name, argv[i + 1], argv[i:i + 2]))
            i += 2
            continue
        out.append((name, inline if eq else None, [word]))
        i += 1
    return out


def _pairs(section: dict[str, str], help: ServerHelp) -> list[tuple[str, str | None, list[str]]]:
    """A preset section's keys (long or short names without dashes, or env names) as flags."""
    out, unknown = [], []
    for key, value in section.items():
        entry = help.by_env.get(key.upper()) if key.upper().startswith("LLAMA_ARG_") else None
        name = entry.names[0] if entry else next((n for n in (f"--{key}", f"-{key}") if n in help.by_name), None)
        if name is None:
            if key in ("load-on-startup", "stop-timeout", "version"):
                continue  # preset-only options
            unknown.append(key)
            continue
        entry = help.by_name[name]
        if entry.arg:
            out.append((name, value, [name, value]))
        elif value.strip().lower() in _FALSE and name not in entry.negatives:
            neg = entry.negatives[-1] if entry.negatives else None
            if neg is None:
                continue
            out.append((neg, None, [neg]))
        else:
            out.append((name, None, [name]))
    if unknown:
        raise ReplayerError(f"preset: b{help.build} llama-server does not know {', '.join(unknown)}")
    return out


def _convert(key: str, name: str, value: str | None, entry) -> Any:
    kind = SETTINGS[key][1]
    if kind == "bool":
        if value is None:
            return name not in entry.negatives
        v = value.strip().lower()
        if v in _TRUE or v in _FALSE:
            return v in _TRUE
        raise ReplayerError(f"--server-args: {name}={value}: not a boolean")
    try:
        return int(value) if kind == "int" else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ReplayerError(f"--server-args: {name} {value}: not a number") from None


def _resolve(help: ServerHelp, given: dict[str, Any], args: list[str], model: str | None,
             notes: list[str]) -> ServerSetup:
    d = dict(help.defaults)
    missing = [k for k in ("n_parallel", "cache_ram_mib", "n_ctx_checkpoints", "n_batch", "n_ubatch")
               if d.get(k) is None and k not in given]
    if missing:
        raise ReplayerError(f"b{help.build}'s --help states no default for {', '.join(missing)}")
    d.update(given)
    n_par, unified = d["n_parallel"], d.get("kv_unified")
    if n_par < 0:
        if unified is False:
            notes.append("-np auto (-1) makes 4 slots with a unified KV cache: --no-kv-unified has no effect")
        n_par, unified = 4, True
    elif unified == "auto" or unified is None:
        unified = False
    idle = bool(d.get("cache_idle_slots"))
    if idle and d["cache_ram_mib"] == 0:
        idle = False  # "--cache-idle-slots requires --cache-ram, disabling"
    if d.get("cache_reuse"):
        notes.append(f"--cache-reuse {d['cache_reuse']}: KV shifting of matching chunks is not simulated")
    return ServerSetup(
        build=help.build, help_source=help.source, n_parallel=n_par, kv_unified=bool(unified),
        cache_ram_mib=d["cache_ram_mib"], cache_idle_slots=idle, n_ctx_checkpoints=d["n_ctx_checkpoints"],
        checkpoint_min_step=d.get("checkpoint_min_step") or 0,
        slot_prompt_similarity=float(d.get("slot_prompt_similarity") or 0.0), n_ctx=d.get("n_ctx") or 0,
        n_batch=d["n_batch"], n_ubatch=d["n_ubatch"], swa_full=bool(d.get("swa_full")),
        cache_reuse=d.get("cache_reuse") or 0, models_max=d.get("models_max"),
        sleep_idle_seconds=d.get("sleep_idle_seconds"), model=model, args=args, given=given, notes=notes)


def read_preset(path: str | Path, model: str | None = None) -> tuple[dict[str, str], str]:
    """The ``[*]`` globals under the model's section of a router preset INI, and that section's name.

    ``model``: the section to take; None takes the only model section (more than one: an error
    naming them)."""
    p = Path(path)
    try:
        if p.stat().st_size > _MAX_PRESET_BYTES:
            raise ReplayerError(f"{p}: a preset larger than {_MAX_PRESET_BYTES} bytes")
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ReplayerError(f"{p}: {exc.strerror or exc}") from None
    ini = configparser.ConfigParser(default_section="\0none", interpolation=None, strict=False)
    ini.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case (env names)
    try:
        ini.read_string("[\0top]\n" + text)
    except configparser.Error as exc:
        raise ReplayerError(f"{p}: not a preset INI: {exc.message.splitlines()[0]}") from None
    sections = [s for s in ini.sections() if s not in ("\0top", "*")]
    if model is None:
        if len(sections) != 1:
            raise ReplayerError(f"{p}: {len(sections)} model sections ({', '.join(sections) or 'none'}): "
                                "name the model to take")
        model = sections[0]
    elif model not in sections:
        raise ReplayerError(f"{p}: no section [{model}] (sections: {', '.join(sections) or 'none'})")
    merged: dict[str, str] = dict(ini["*"]) if ini.has_section("*") else {}
    merged.update(ini[model])
    return merged, model


def from_preset(path: str | Path, help: ServerHelp, *, model: str | None = None,
                command_line: str | list[str] = "") -> ServerSetup:
    """A router's model as its child server runs: globals, the model's section, then the command line."""
    section, name = read_preset(path, model)
    setup = parse_server_args(command_line, help, preset=section)
    setup.notes.append(f"router preset {Path(path).name}: [{name}]")
    return setup
