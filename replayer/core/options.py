"""The replay options, each declared once: name, type, default, help, choices, the modes it
applies to and the setup screen's control for it.

Why: the same option used to be written out in ``ReplayConfig``, the ``replay`` parser, the
bisect/advise parsers, the CLI's config builder and the setup screen, and their defaults and
ranges drifted apart. Now the default is ``ReplayConfig``'s (read from it, never restated), the
range is the type's, and the CLI's arguments, the CLI's config
(``config_from``), the setup screen's text fields (``Option.text``/``Option.parse_text``) and
the saved settings (``to_settings``/``from_settings``: the setup's choices remembered in
settings.json) are all rendered from ``OPTIONS`` (the CLI's parser in ``cli_args.add_options``). Textual-free: the UI reads this table, the table knows no UI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable

from replayer.core.errors import ReplayerError

if TYPE_CHECKING:  # imported where used: the CLI reads this table before it knows it will prepare anything
    from replayer.core.prepare import ReplayConfig

#: the largest token count any option may name: far beyond any context llama.cpp can hold (2^24)
MAX_TOKENS = 1 << 24
MODES = ("resume", "session")
BOTH = frozenset(MODES)


class BadValue(ValueError):
    """A value outside an option's type or range: the message says which and why (the CLI turns it
    into argparse's one line, the setup screen into its error line)."""


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An ``int`` type that refuses values outside ``[lo, hi]`` (a bare ``int`` takes
    ``-b 1000000000000``, which then fails far from its cause)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            raise BadValue(f"{text!r} is not a whole number") from None
        if value < lo or (hi is not None and value > hi):
            raise BadValue(f"{text} is out of range ({_range(lo, hi)})")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own messages
    return parse


def float_in(lo: float, hi: float | None = None, *, open_low: bool = False) -> Callable[[str], float]:
    """A finite ``float`` type in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``): no nan, no inf."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise BadValue(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise BadValue(f"{text} is not a finite number")
        if value < lo or (open_low and value == lo) or (hi is not None and value > hi):
            low = f"> {lo:g}" if open_low else f"≥ {lo:g}"
            high = f", ≤ {hi:g}" if hi is not None else ""
            raise BadValue(f"{text} is out of range ({low}{high})")
        return value

    parse.__name__ = "number"
    return parse


def _range(lo: int, hi: int | None) -> str:
    return f"{lo}…{hi:,}" if hi is not None else f"≥ {lo}"


@dataclass(frozen=True)
class Option:
    """One replay option. ``field`` is its ``ReplayConfig`` attribute (None: not part of the
    config, e.g. the mode); ``dest`` the argparse attribute when it differs from the flag."""

    flags: tuple[str, ...]
    help: str
    field: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[tuple[str, str], ...] | None = None  # (value, label in the app)
    modes: frozenset[str] = BOTH
    widget: str | None = None  # the setup screen's control id
    flag: bool = False  # a switch (store_true)
    nargs: str | None = None
    metavar: str | None = None
    dest: str | None = None
    default_value: Any = None  # only for options that are not in ReplayConfig

    @property
    def name(self) -> str:
        """The argparse attribute: ``dest`` or the long flag's name."""
        long = next(f for f in self.flags if f.startswith("--"))
        return self.dest or long[2:].replace("-", "_")

    @property
    def default(self) -> Any:
        """``ReplayConfig``'s default (its fields' defaults are the only ones)."""
        if not self.field:
            return self.default_value
        from replayer.core.prepare import ReplayConfig

        return next(f.default for f in fields(ReplayConfig) if f.name == self.field)

    def text(self, config: ReplayConfig) -> str:
        """The value a setup screen's text field shows: empty for "the build's own"."""
        value = getattr(config, self.field) if self.field else self.default
        return "" if value is None else str(value)

    def parse_text(self, text: str) -> Any:
        """A setup screen's text field, with the CLI's type and range: empty is the default."""
        text = text.strip()
        if not text:
            return self.default
        try:
            return self.type(text) if self.type else text
        except BadValue as exc:
            raise ReplayerError(f"{self.flags[-1]}: {exc}") from None

    def argument(self, default: Any = None) -> dict[str, Any]:
        """This option's keywords for a command-line argument (``default`` overrides the config's,
        for a command such as advise); the CLI adds them to its parser (cli_args.add_options)."""
        kw: dict[str, Any] = {"dest": self.name}
        if self.flag:
            return kw | {"action": "store_true"}
        value = self.default if default is None else default
        kw["default"] = (value or None) if self.nargs else value  # no list given: None, shown as nothing
        kw |= {k: getattr(self, k) for k in ("type", "nargs", "metavar") if getattr(self, k) is not None}
        if self.choices:
            kw["choices"] = [v for v, _ in self.choices]
        return kw


def _o(*flags: str, help: str, **kw: Any) -> Option:
    return Option(tuple(flags), help, **kw)


_TOKENS = int_in(1, MAX_TOKENS)

OPTIONS: tuple[Option, ...] = (
    _o("--a", field="a", widget="build-a", help="build A (number, generation or llama-server path)"),
    _o("--b", field="b", widget="build-b", help="build B (number, generation or llama-server path)"),
    _o("--engine", field="engine", widget="engine",
       choices=(("simulated", "simulated (cost model)"), ("live", "live (real llama-server)")),
       help="simulated: the cost model; live: real llama-server builds"),
    _o("--mode", widget="mode", default_value="resume",
       choices=(("resume", "resume — one cold prefill of the whole conversation"),
                ("session", "session — every turn as the agent sent it")),
       help="resume: one cold prefill of the whole conversation; session: every turn as the agent "
            "sent it, with the prompt cache reused or lost"),
    _o("--backend", field="backend", widget="backend",
       help="simulated: the GPU preset's backend unless given; live: the installed build's backend (default: cpu)"),
    _o("--gpu", field="gpu", widget="gpu",
       help="GPU preset (replayer presets) or custom:vram=GB,bw=GB/s,tflops=TFLOPS,pcie=GB/s"),
    _o("--model", field="model", widget="model",
       help="model preset, or a GGUF path (simulated: its header only; live: the model served)"),
    _o("--tokenizer", field="tokenizer",
       help="estimate | gguf:PATH | server:URL (default: a GGUF model's own, else estimate)"),
    _o("--template", field="template", help="bundled template name or a .jinja file (default: the model preset's)"),
    _o("-b", "--batch-size", field="n_batch", type=_TOKENS, widget="n-batch", help="llama-server -b (logical batch)"),
    _o("-ub", "--ubatch-size", field="n_ubatch", type=_TOKENS, widget="n-ubatch",
       help="llama-server -ub (physical batch; llama-server's own default)"),
    _o("--cms", "--checkpoint-min-step", field="checkpoint_min_step", dest="cms", type=int_in(0, MAX_TOKENS),
       widget="cms", help="checkpoint min step"),  # the help names the builds' defaults: min_step_help()
    _o("--ctx-checkpoints", field="ctx_checkpoints", type=int_in(0, 10_000), widget="ctx-checkpoints",
       help="llama-server --ctx-checkpoints"),
    _o("--server", field="server", help="live: run A against this already running server (http://127.0.0.1:PORT)"),
    _o("--server-b", field="server_b", help="live: run B against this already running server"),
    _o("--server-log", field="server_log", help="live attach: follow run A's server --log-file (-lv 4) for checkpoints"),
    _o("--observed", field="observed", metavar="SERVER.LOG", modes=frozenset({"session"}),
       help="session of a --log-prompts-dir folder: the same server's log (-lv 4 --log-file, its stderr, or "
            "--log-jsonl), read as what it did with each prompt"),
    _o("--parallel-runs", field="parallel_runs", flag=True, help="live: run A and B at the same time"),
    _o("--threads", field="threads", type=int_in(1, 1024),
       help="live: the servers' -t/-tb (default: llama-server's own, every core)"),
    _o("--ctx-size", field="ctx_size", type=_TOKENS, help="live: -c (default: fits the prompt)"),
    _o("--timeout", field="timeout", type=float_in(0, 7 * 24 * 3600, open_low=True),
       help="live: wall-clock seconds from a server's start to its first prefill's end (its start-up "
            "and the prompt's layout counted in), and for each later layout and prefill of a session"),
    _o("--calibrate", field="calibrate", flag=True, modes=frozenset({"resume"}),
       help="live: fit a cost line from per-batch times"),
    _o("--holdout", field="holdout", nargs="+", metavar="SESSION", modes=frozenset({"resume"}),
       help="with --calibrate: run these sessions live too and report the line's error on them"),
    _o("--repeat", field="repeat", type=int_in(1, 20), metavar="N", modes=frozenset({"resume"}),
       help="with --calibrate: run each session and build N times and time each batch by "
            "the median (a shared or throttled machine varies 15-35%% from run to run)"),
    _o("--calibration", field="calibration", help="simulate with a line saved by --calibrate instead of a GPU preset"),
    # not a ReplayConfig field: the server's setup is the session replay's (core/server), parsed per build
    _o("--server-args", modes=frozenset({"session"}), widget="server-args", metavar="ARGS|@FILE",
       help="session (simulated): the llama-server command line users run (slots, --cache-ram, …), "
            "or @file holding it; defaults from each build's own --help"),
)
BY_NAME = {o.name: o for o in OPTIONS}
#: the cost model's and the layout's choices (bisect and advise take these of replay's)
MODEL = ("model", "gpu", "backend", "tokenizer", "template", "calibration")
KNOBS = ("batch_size", "ubatch_size", "cms", "ctx_checkpoints")
#: ReplayConfig fields a session file's own options set (``_common_session``), not this table
SESSION_FILE_FIELDS = ("format", "system_prompt", "tools")


def option(name: str) -> Option:
    return BY_NAME[name]


def config_from(args: Any) -> ReplayConfig:
    """The ``ReplayConfig`` of whatever table options a command has; the rest keep their defaults
    (bisect and advise take a subset)."""
    from replayer.core.prepare import ReplayConfig

    kw: dict[str, Any] = {f: getattr(args, f) for f in SESSION_FILE_FIELDS if hasattr(args, f)}
    for o in OPTIONS:
        if o.field and hasattr(args, o.name):
            kw[o.field] = getattr(args, o.name)
    if "holdout" in kw:
        kw["holdout"] = tuple(kw["holdout"] or ())
    return ReplayConfig(**kw)


#: the options settings.json remembers: the setup screen's controls that are part of the config
#: (the mode is a setting of its own, ``Settings.mode``)
REMEMBERED: tuple[Option, ...] = tuple(o for o in OPTIONS if o.widget and o.field)
#: preset names an option's saved value must be (the setup screen offers nothing else)
_PRESET_TABLES = {"gpu": "GPUS", "model": "MODELS", "backend": "BACKENDS"}


def to_settings(config: ReplayConfig) -> dict[str, Any]:
    """The remembered options of ``config`` as settings.json holds them (by option name): only
    those that differ from the default, so a default stays the CLI's, and a later version's new
    default applies to whatever the user never changed."""
    out = {}
    for o in REMEMBERED:
        value = getattr(config, o.field)
        if value != o.default:
            out[o.name] = value
    return out


def saved_value(o: Option, value: Any) -> Any:
    """A value read back from settings.json (untrusted), checked as the CLI checks its argument:
    the option's type and range, its choices, a preset name; raises ``BadValue``."""
    if o.type is not None:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise BadValue(f"{value!r} is not a whole number")
        return o.type(str(value))
    if not isinstance(value, str) or not value.strip() or len(value) > 4096 or "\n" in value:
        raise BadValue(f"{value!r} is not a name")
    if o.choices and value not in {v for v, _ in o.choices}:
        raise BadValue(f"{value!r} is not one of {', '.join(v for v, _ in o.choices)}")
    if o.field in _PRESET_TABLES:
        from replayer.core.hardware import presets

        if value not in getattr(presets, _PRESET_TABLES[o.field]):
            raise BadValue(f"{value!r} is not a preset")
    elif o.field in ("a", "b") and "/" not in value:
        from replayer.core.builds.catalog import parse_build

        try:
            parse_build(value)
        except ReplayerError as exc:
            raise BadValue(str(exc)) from None
    return value


def from_settings(saved: Any, config: ReplayConfig | None = None) -> tuple[ReplayConfig, list[str]]:
    """``config`` (default: the defaults) with the options settings.json remembers; a value the
    option refuses is left out (the default stays) and named in the problems returned."""
    from dataclasses import replace

    from replayer.core.prepare import ReplayConfig

    config = config or ReplayConfig()
    if not isinstance(saved, dict):
        return config, [f"replay options: {type(saved).__name__}, not an object"] if saved else []
    changes, problems = {}, []
    for o in REMEMBERED:
        if o.name in saved and saved[o.name] is not None:
            try:
                changes[o.field] = saved_value(o, saved[o.name])
            except BadValue as exc:
                problems.append(f"replay option {o.name}: {exc}")
    return replace(config, **changes), problems


def config_fields() -> set[str]:
    """Every ``ReplayConfig`` field, to check the table against (tests/test_options.py)."""
    from replayer.core.prepare import ReplayConfig

    return {f.name for f in fields(ReplayConfig)}

