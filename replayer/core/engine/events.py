"""The event stream: the one contract between engines and everything that shows results.

Events are small slotted dataclasses that orjson serialises natively. They are values:
nothing changes an event once it is emitted. They are not ``frozen`` because a frozen
dataclass's ``__init__`` costs four times as much, and a simulated run makes two events
per batch (thousands for a fragmented 128k-token resume). Every event carries ``run`` (which pane it belongs to)
and ``t_ms`` (milliseconds since the run's prompt processing started).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Union

import orjson




@dataclass(slots=True)
class RunStarted:
    type: ClassVar[str] = "run_started"
    run: str
    label: str
    build: str
    generation: str
    engine: str
    n_tokens: int
    n_past: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    t_ms: float = 0.0


@dataclass(slots=True)
class BatchDone:
    type: ClassVar[str] = "batch_done"
    run: str
    index: int
    start: int
    n_tokens: int
    n_ubatches: int
    reason: str
    t_start_ms: float
    t_ms: float

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    @property
    def duration_ms(self) -> float:
        return self.t_ms - self.t_start_ms


@dataclass(slots=True)
class CheckpointCreated:
    type: ClassVar[str] = "checkpoint_created"
    run: str
    n_tokens: int
    pos_min: int
    pos_max: int
    size_mib: float
    count: int  # list length after creation, as the server logs "created … %d of %d"
    n_max: int
    t_ms: float


@dataclass(slots=True)
class CheckpointErased:
    type: ClassVar[str] = "checkpoint_erased"
    run: str
    n_tokens: int
    pos_min: int
    pos_max: int
    reason: str
    t_ms: float


@dataclass(slots=True)
class CheckpointRestored:
    type: ClassVar[str] = "checkpoint_restored"
    run: str
    n_tokens: int
    pos_min: int
    pos_max: int
    n_past: int
    t_ms: float


@dataclass(slots=True)
class Progress:
    type: ClassVar[str] = "progress"
    run: str
    processed: int
    total: int
    t_ms: float


@dataclass(slots=True)
class LogLine:
    """A line of a live server's ``-lv 4`` log that says what it did with a prompt
    (``server.logfacts.relevant_lines``), with the request it was logged after (``turn``;
    ``None``: before the first request, the server's start-up). A repro bundle's ``logs/``."""

    type: ClassVar[str] = "log_line"
    run: str
    text: str
    t_ms: float
    turn: int | None = None


@dataclass(slots=True)
class RunFinished:
    type: ClassVar[str] = "run_finished"
    run: str
    n_tokens: int
    n_processed: int
    prompt_ms: float
    tokens_per_s: float
    n_batches: int
    n_checkpoints: int
    t_ms: float
    #: ``complete``, or ``prefill complete, generation failed: …`` when the server failed after
    #: the whole prompt was processed (its prefill facts stand; see ``STATUS_COMPLETE``)
    status: str = "complete"


@dataclass(slots=True)
class RunFailed:
    type: ClassVar[str] = "run_failed"
    run: str
    error: str
    t_ms: float = 0.0
    status: str = ""  # always ``failed: <error>`` (set from ``error``)

    def __post_init__(self) -> None:
        self.status = failed_status(self.error)


#: A run's status: how far it got. Only a run whose prefill finished gives a speed.
STATUS_COMPLETE = "complete"
GENERATION_FAILED = "prefill complete, generation failed: "


def failed_status(error: str) -> str:
    return f"failed: {error}"


def prefill_complete(status: str) -> bool:
    return status == STATUS_COMPLETE or status.startswith(GENERATION_FAILED)


def to_dict(event: Event) -> dict[str, Any]:
    d = {"type": event.type}
    for f in fields(event):
        d[f.name] = getattr(event, f.name)
    return d


def to_json(event: Event) -> bytes:
    """One JSONL line (without newline), ``type`` first so streams are easy to grep."""
    return orjson.dumps(to_dict(event))



@dataclass(slots=True)
class LayoutReady:
    """The prompt as the run's server laid it out (live runs: its own template and tokenizer)."""

    type: ClassVar[str] = "layout_ready"
    run: str
    n_tokens: int
    user_starts: list[int]
    spans: list[tuple[str, int]]  # (role, start) of every message span
    tokenizer: str
    template: str
    t_ms: float = 0.0


@dataclass(slots=True)
class ServerFacts:
    """What the server reported about the run besides its batches: ``timings`` and the log's batch starts."""

    type: ClassVar[str] = "server_facts"
    run: str
    timings: dict[str, Any]
    log_batch_starts: list[int]
    t_ms: float = 0.0


Event = Union[RunStarted, BatchDone, CheckpointCreated, CheckpointErased, CheckpointRestored,
              Progress, LogLine, LayoutReady, ServerFacts, RunFinished, RunFailed]
