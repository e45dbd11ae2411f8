"""The values every layer exchanges: server knobs, a prompt's spans, one run's spec.

They live here, beside neither the prompt nor the engine code, so that ``core/prompt``
(which produces ``PromptSpans``) and ``core/engine`` (which consumes them) both import
this module and never each other. Defaults are llama-server's and are written once:
the CLI, the app and the presets read them from ``Knobs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from replayer.core.builds.catalog import Build
from replayer.core.errors import ReplayerError

Memory = Literal["plain", "swa", "recurrent"]
MEMORIES = ("plain", "swa", "recurrent")
_MEMORY_ALIASES = {"hybrid": "recurrent", "kv": "plain", "full": "plain", "iswa": "swa"}


def parse_memory(text: str) -> Memory:
    m = _MEMORY_ALIASES.get(text.lower(), text.lower())
    if m not in MEMORIES:
        raise ReplayerError(f"unknown memory kind {text!r}; choose plain, swa or recurrent")
    return m  # type: ignore[return-value]


@dataclass(frozen=True)
class Knobs:
    """Server settings that shape the schedule (defaults are llama-server's)."""

    n_batch: int = 2048
    n_ubatch: int = 512
    n_ctx_checkpoints: int = 32
    checkpoint_min_step: int | None = None  # None = the build's default (256 / 8192)
    memory: Memory = "plain"
    n_swa: int = 256  # sliding window, only for memory == "swa"
    swa_cache: int | None = None  # SWA cache cells; None = computed as the server does
    n_ctx: int | None = None  # caps n_batch like the server (n_batch_eff = min(n_ctx, -b))

    def validate(self) -> "Knobs":
        if self.n_batch < 1:
            raise ReplayerError(f"-b/--batch-size must be ≥ 1, got {self.n_batch}")
        if self.n_ubatch < 1:
            raise ReplayerError(f"-ub/--ubatch-size must be ≥ 1, got {self.n_ubatch}")
        if self.n_ubatch > self.n_batch:
            raise ReplayerError(
                f"-ub {self.n_ubatch} is larger than -b {self.n_batch}; "
                "llama-server would clamp it, give -ub ≤ -b"
            )
        if self.n_ctx_checkpoints < 0:
            raise ReplayerError("--ctx-checkpoints must be ≥ 0")
        if self.checkpoint_min_step is not None and self.checkpoint_min_step < 0:
            raise ReplayerError("--checkpoint-min-step must be ≥ 0")
        if self.memory == "swa" and self.n_swa < 1:
            raise ReplayerError("an SWA model needs a sliding window ≥ 1")
        return self

    @property
    def n_batch_eff(self) -> int:
        return min(self.n_batch, self.n_ctx) if self.n_ctx else self.n_batch

    @property
    def n_ubatch_eff(self) -> int:
        return min(self.n_ubatch, self.n_batch_eff)

    @property
    def size_swa(self) -> int:
        """SWA cache cells for one slot: round_up_256(n_swa + n_ubatch), capped by n_ctx."""
        if self.swa_cache is not None:
            return self.swa_cache
        cells = self.n_swa + self.n_ubatch_eff
        if self.n_ctx:
            cells = min(cells, self.n_ctx)
        return ((cells + 255) // 256) * 256

    def min_step(self, build: Build) -> int:
        if self.checkpoint_min_step is not None:
            return self.checkpoint_min_step
        return build.default_checkpoint_min_step

    @property
    def checkpoints_enabled(self) -> bool:
        """The server's ``ckpt_enabled`` for a completion task (§4)."""
        return self.n_ctx_checkpoints > 0 and self.memory in ("swa", "recurrent")


#: llama-server's defaults, the one place the CLI and the app read them from.
DEFAULT_KNOBS = Knobs()
# --timeout: a live run's wall-clock limit from its server's start to its (first) prefill's end
DEFAULT_TIMEOUT_S = 600.0
# -c of the one server a live session replay keeps up (its prompts only grow, so room to spare)
DEFAULT_SESSION_CTX = 32768


@dataclass(frozen=True)
class PromptSpans:
    """What the scheduler needs of a prompt layout: its length and user starts.

    ``n_before_user`` is G0's count of tokens before the last user message (from byte
    spans); by default it equals the last user start, as it does for every template whose
    user marker begins at a token boundary.
    """

    n_tokens: int
    user_starts: tuple[int, ...]
    n_before_user: int | None = None

    @classmethod
    def of(cls, n_tokens: int, user_starts, n_before_user: int | None = None) -> "PromptSpans":
        starts = tuple(map(int, user_starts))
        if n_tokens < 1:
            raise ReplayerError(f"the prompt must have at least one token, got {n_tokens}")
        if not starts or (starts[0] >= 0 and starts[-1] < n_tokens
                          and all(a < b for a, b in zip(starts, starts[1:]))):
            return cls(n_tokens, starts, n_before_user)
        for i, u in enumerate(starts):  # say what is wrong
            if u < 0:
                raise ReplayerError(f"user start {u} is negative")
            if u >= n_tokens:
                raise ReplayerError(f"user start {u} is not inside the prompt of {n_tokens} tokens")
            if i and u <= starts[i - 1]:
                raise ReplayerError(
                    f"user starts must be strictly increasing ({starts[i - 1]} then {u})"
                )
        return cls(n_tokens, starts, n_before_user)

    @property
    def last_user(self) -> int:
        return self.user_starts[-1] if self.user_starts else -1

    @property
    def g0_before_user(self) -> int:
        return self.n_before_user if self.n_before_user is not None else self.last_user


@dataclass(frozen=True)
class LiveTarget:
    """Where a live run happens: a build to start on a model, or a server already running.

    ``build_spec`` is the build as the user wrote it (a number or a binary path); the
    number a run reports comes from the binary itself.
    """

    build_spec: str
    model: Path | None = None
    backend: str = "cpu"
    ctx_size: int | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    server: str | None = None  # attach: this server's URL
    server_log: Path | None = None  # attach: its -lv 4 log file
    threads: int | None = None  # the server's -t/-tb; None: its own default (every core)


@dataclass
class RunSpec:
    """Everything one run needs; every engine's ``events(spec, prepared)`` takes it."""

    run: str  # "A" or "B"
    build: Build
    knobs: Knobs
    label: str = ""
    checkpoint_mib: float = 0.0
    settings: dict = field(default_factory=dict)
    engine: str = "simulated"
    live: LiveTarget | None = None
