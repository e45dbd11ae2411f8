"""What a llama-server may answer, checked before anything believes it; and how long it may take.

Every reply the live engine reads (``/health``, ``/props``, ``/apply-template``, ``/tokenize``,
the stream's events and their ``prompt_progress``/``timings``) is parsed by a strict pydantic
model: a reply of the wrong shape is a ``ProtocolError`` with one line saying which reply and
which field, never a ``KeyError`` three frames later. The shapes follow llama.cpp's
``tools/server`` sources (``server-context.cpp``: ``get_res_props``, ``post_apply_template``,
``post_tokenize``, the SSE writer that ends with ``data: [DONE]`` or with ``{"error": …}``;
``server-task.cpp``: ``result_prompt_progress::to_json``; ``server-common.cpp``:
``server_slot_stats::to_json``, ``format_error_response``).

httpx's timeouts are per read, so a server that trickles ``:`` keep-alive comments, or never
sends a byte after the headers, would hold a run forever. ``Clock`` gives a run and each of its
phases a wall-clock end; ``Guard`` enforces it on whatever request is blocked, by shutting down
that request's socket when the phase's end passes (the blocked read then returns at once).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Iterable, Iterator, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, NonNegativeInt, ValidationError

from replayer.core.errors import ReplayerError, RunError


class ProtocolError(RunError):
    """A llama-server reply that is not what llama-server sends."""


class DeadlineExceeded(RunError):
    """A run or one of its phases ran past its wall-clock end."""


class StreamCut(RunError):
    """The event stream ended without ``data: [DONE]``."""


class _Reply(BaseModel):
    # strict: "12" is not a number of tokens, true is not a position; unknown fields are fine
    model_config = ConfigDict(strict=True, extra="ignore")


class Health(_Reply):
    status: str


class GenerationSettings(_Reply):
    n_ctx: NonNegativeInt | None = None


class Props(_Reply):
    chat_template: str = ""
    bos_token: str | None = None
    eos_token: str | None = None
    default_generation_settings: GenerationSettings = GenerationSettings()
    total_slots: NonNegativeInt | None = None  # -np as the server resolved it


class AppliedTemplate(_Reply):
    prompt: str


class TokenPiece(_Reply):
    id: int


class Tokens(_Reply):
    tokens: list[int | TokenPiece]

    def ids(self) -> list[int]:
        return [t if isinstance(t, int) else t.id for t in self.tokens]


class PromptProgress(_Reply):
    total: NonNegativeInt
    cache: NonNegativeInt = 0
    processed: NonNegativeInt
    time_ms: float


class Timings(_Reply):
    # nlohmann::json writes a NaN/inf rate as null
    prompt_n: NonNegativeInt | None = None
    prompt_ms: float | None = None
    prompt_per_second: float | None = None
    cache_n: NonNegativeInt | None = None


class ErrorBody(_Reply):
    message: str = ""
    type: str | None = None
    code: int | None = None


class Chunk(_Reply):
    """One ``data:`` event of ``/v1/chat/completions`` with ``stream`` and ``return_progress``."""

    prompt_progress: PromptProgress | None = None
    timings: Timings | None = None
    error: ErrorBody | str | None = None

    @property
    def error_message(self) -> str | None:
        if self.error is None:
            return None
        return one_line(self.error if isinstance(self.error, str) else (self.error.message or "unknown error"))


M = TypeVar("M", bound=_Reply)


def one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse(model: type[M], raw: bytes | str, what: str) -> M:
    """``raw`` as ``model``, or a ``ProtocolError`` naming the reply and its first fault."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        if err["type"] == "json_invalid":
            raise ProtocolError(f"llama-server sent a {what} that is not JSON: {one_line(repr(raw), 80)}") from None
        where = "".join(f"{x}: " if i == len(err["loc"]) - 1 else f"{x}." for i, x in enumerate(err["loc"]))
        got = one_line(repr(err.get("input")), 60)
        raise ProtocolError(f"llama-server sent a malformed {what}: {where}{err['msg']} (got {got})") from None


def http_error(path: str, status: int, body: bytes) -> str:
    """One line for a non-200 answer, whatever its body is (an error object, a list, HTML)."""
    try:
        msg = Chunk.model_validate_json(body).error_message
    except ValidationError:
        msg = None
    if not msg:
        msg = one_line(body.decode("utf-8", "replace"), 200) or "no body"
    return f"llama-server {path} answered HTTP {status}: {msg}"


def checked(resp: httpx.Response, model: type[M], path: str) -> M:
    """A 200 reply of ``path`` parsed as ``model``; any other status is a ``RunError``."""
    if resp.status_code != 200:
        raise RunError(http_error(path, resp.status_code, resp.read()))
    return parse(model, resp.read(), f"{path} reply")


def sse_chunks(lines: Iterable[str]) -> Iterator[Chunk]:
    """The stream's events until ``[DONE]``; a stream that just stops raises ``StreamCut``.

    Comments (``:`` keep-alives), ``event:`` lines and blank separators carry no data.
    """
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield parse(Chunk, data, "stream event")
    raise StreamCut("the stream ended without [DONE]")


# -- wall-clock deadlines ------------------------------------------------------------------

class Clock:
    """A run's wall-clock end and the current phase's; a phase never outlives the run."""

    def __init__(self, run_seconds: float) -> None:
        self.run_seconds = run_seconds
        self.run_end = time.monotonic() + run_seconds
        self.name, self.seconds, self.late = "run", run_seconds, None
        self.end = self.run_end

    def phase(self, name: str, seconds: float, late: str | None = None) -> "Clock":
        """Start phase ``name``; ``late`` is what to say if it is still running after ``seconds``."""
        self.name, self.seconds, self.late = name, seconds, late
        self.end = min(time.monotonic() + seconds, self.run_end)
        return self

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def error(self) -> DeadlineExceeded:
        if self.end >= self.run_end:  # the run's own end came first
            return DeadlineExceeded(f"the run did not finish within its {self.run_seconds:g} s deadline "
                                    f"(it was in its {self.name} phase)")
        return DeadlineExceeded(self.late or f"the {self.name} phase did not finish within {self.seconds:g} s")


class Guard:
    """Cuts every connection a client opened once the clock's current phase is over.

    Requests go through ``client()``: each records its TCP stream (httpcore's
    ``connection.connect_tcp`` trace; keep-alive is off so every request connects), and a
    watcher thread shuts those sockets down at the phase's end, so a read blocked on a silent
    or trickling server returns at once. ``fired`` tells the caller why the read failed.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.fired = False
        self._streams: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="replayer-deadline")
        self._watcher.start()

    def _trace(self, name: str, info: dict) -> None:
        if name == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            with self._lock:
                self._streams = [s for s in self._streams if _open(s)] + [info["return_value"]]

    def _hook(self, request: httpx.Request) -> None:
        request.extensions["trace"] = self._trace

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            if self.clock.expired():
                self.cut()

    def cut(self) -> None:
        """Shut down every open connection (idempotent)."""
        with self._lock:
            streams, self._streams = self._streams, []
            if streams:
                self.fired = True
        for s in streams:
            with contextlib.suppress(Exception):
                s.get_extra_info("socket").shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """The run is over: stop watching, and cut what is still open (its reader thread ends)."""
        self._stop.set()
        with self._lock:
            fired = self.fired
        self.cut()
        self.fired = fired

    def client(self, read_timeout: float) -> httpx.Client:
        return httpx.Client(timeout=httpx.Timeout(read_timeout, connect=5.0),
                            limits=httpx.Limits(max_keepalive_connections=0),
                            event_hooks={"request": [self._hook]})

    def explain(self, exc: BaseException) -> ReplayerError:
        """The error to report for a failed request: the deadline when the guard cut it."""
        if self.fired or self.clock.expired():
            return self.clock.error()
        if isinstance(exc, ReplayerError):
            return exc
        return RunError(f"the request to llama-server failed: {type(exc).__name__}: {one_line(str(exc), 160)}")


def _open(stream: Any) -> bool:
    with contextlib.suppress(Exception):
        return stream.get_extra_info("socket").fileno() != -1
    return False
