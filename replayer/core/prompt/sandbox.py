"""A render budget for untrusted chat templates: time, output size and memory.

Jinja's sandbox stops a template from reaching Python, not from spending it: two nested
``range(99999)`` loops run for hours, ``'a' * 10**9`` takes gigabytes, ``10**(10**7)`` a
minute. A template can come from any GGUF or server, so every untrusted render runs in one
long-lived worker process (started on first use, ~0.2 s) that

- renders with :class:`BoundedSandbox`: ``*``, ``**`` and ``+`` refuse results over the
  output budget before building them (a clear message, at once);
- caps its own address space (``RLIMIT_AS``) and CPU time for each render, so no hook that
  was missed can take the machine's memory or outlive the parent;
- is killed when the wall-clock budget runs out; the next render starts a fresh one.

Errors come back as the exception types ``templates.render`` handles (so its message-shape
retries still work), or as a one-line ``TemplateError``. Bundled templates (replayer's own)
never come here: they render in-process at full speed.
"""

from __future__ import annotations

import atexit
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

import orjson
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from replayer.core import children
from replayer.core.frames import await_ready, receive_frame, send_frame
from replayer.core.errors import TemplateError
from replayer.core.prompt import jinja_values

#: defaults of ``--template-timeout`` and ``--template-max-mb``
DEFAULT_SECONDS = 10.0
DEFAULT_MAX_MB = 64
#: integers a template may build (bits): far beyond any token id or count
MAX_INT_BITS = 1 << 16
#: address space a render may use beyond the worker's size before it: the context, the output
#: and Jinja's intermediate strings
HEADROOM_PER_OUTPUT = 8
HEADROOM_MIN = 512 << 20
#: the worker says this byte once it has imported what it renders with
READY = b"R"
_START_SECONDS = 120.0


@dataclass
class Budget:
    seconds: float = DEFAULT_SECONDS
    max_bytes: int = DEFAULT_MAX_MB << 20

    def describe(self) -> str:
        return f"{self.seconds:g} s, {self.max_bytes / (1 << 20):g} MB"


_budget = Budget()


def set_budget(seconds: float | None = None, max_mb: float | None = None) -> Budget:
    """The budget of every later untrusted render in this process (the CLI's flags; None: the
    default)."""
    _budget.seconds = float(DEFAULT_SECONDS if seconds is None else seconds)
    _budget.max_bytes = int((DEFAULT_MAX_MB if max_mb is None else max_mb) * (1 << 20))
    return _budget


def budget() -> Budget:
    return _budget


class RaiseException(Exception):
    """A template's own ``raise_exception(...)``: the conversation, as shaped, is refused."""


class BudgetExceeded(Exception):
    """Raised by the sandbox's hooks; becomes a one-line ``TemplateBudgetError``."""


class TemplateBudgetError(TemplateError):
    """A render went over its budget: the template, not the messages, is at fault, so no
    other message shape is tried."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


#: list methods llama.cpp's engine gives templates (value.cpp:1090, 1101): in place, and harmless
#: (a render works on its own copy of the request; its memory is on the budget)
_LIST_METHODS = frozenset({"append", "pop"})


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus size checks on the operators that multiply sizes; ``+`` of a
    string as llama.cpp's engine does it (``jinja_values.concat``), and the list methods the
    server's templates use (Kimi-K2's ``ns.list.append``) allowed."""

    intercepted_binops = frozenset({"*", "**", "+"})
    max_bytes = DEFAULT_MAX_MB << 20
    code_generator_class = jinja_values.ServerCodeGenerator

    @staticmethod
    def concat_values(values: tuple) -> str:
        return jinja_values.concat_all(*values)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, list) and attr in _LIST_METHODS:
            return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
        return super().is_safe_attribute(obj, attr, value)

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                if right * max(left.bit_length() - 1, 1) > MAX_INT_BITS:
                    raise BudgetExceeded(f"{left} ** {right} is a number too large to build")
            return left**right
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int):
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise BudgetExceeded("a product too large to build")
            else:
                seq, n = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(n, int) and _size(seq) * max(n, 0) > self.max_bytes:
                    raise BudgetExceeded(f"a sequence of {_size(seq) * n:,} items is over the output budget")
            return left * right
        if _size(left) + _size(right) > self.max_bytes:
            raise BudgetExceeded(f"a sequence of {_size(left) + _size(right):,} items is over the output budget")
        joined = jinja_values.concat(left, right)
        return left + right if joined is NotImplemented else joined


# -- the parent's side ---------------------------------------------------------------------

class _Worker:
    """One worker process and the pipe to it; one render at a time."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        """A running worker, ready: its start (imports, ~0.2 s, longer on a busy machine) is
        not charged to a render's time budget."""
        if self.proc is None or self.proc.poll() is not None:
            # forked from the long-lived spawner thread: the kernel kills the worker when
            # replayer dies, not when the thread of the first render ends (it used to, and
            # the next render paid a fresh worker's start)
            proc = children.spawn_tied([sys.executable, "-m", "replayer.core.prompt.sandbox_worker"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if not await_ready(proc, READY, _START_SECONDS):
                proc.kill()
                proc.wait()
                raise TemplateError("the chat template's render process did not start")
            self.proc = proc
        return self.proc

    def prestart(self) -> None:
        """Start the worker now, in the background: its interpreter and imports (~0.1 s idle,
        over a second on a loaded machine) overlap with the caller's own work, and the first
        render waits on the lock until it is ready."""
        def start() -> None:
            with self.lock:
                try:
                    self._start()
                except TemplateError:
                    pass  # the render that needs it reports the failure

        threading.Thread(target=start, name="template-worker-start", daemon=True).start()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def render(self, source: str, ctx: dict[str, Any], limit: Budget, op: str = "render") -> Any:
        with self.lock:
            proc = self._start()
            request = {"op": op, "source": source, "ctx": ctx, "seconds": limit.seconds,
                       "max_bytes": limit.max_bytes}
            try:
                payload = orjson.dumps(request, default=str)
                send_frame(proc.stdin, payload)
            except (BrokenPipeError, OSError):
                self.stop()
                raise TemplateError("the chat template's render process stopped before it started") from None
            # the wall clock is the parent's: a worker stuck in C code cannot fool it
            expired = threading.Event()
            timer = threading.Timer(limit.seconds, lambda: (expired.set(), proc.kill()))
            timer.start()
            try:
                reply = receive_frame(proc.stdout)
            finally:
                timer.cancel()
            if reply is None:
                code = proc.wait()
                self.stop()
                if expired.is_set() or code == -signal.SIGXCPU:
                    raise TemplateBudgetError(f"the chat template did not finish within {limit.seconds:g} s "
                                        "(render budget; --template-timeout to change)")
                raise TemplateError(f"the chat template's render process ended (exit status {code}, "
                                    "out of memory?)")
            return orjson.loads(reply)


_worker = _Worker()
atexit.register(_worker.stop)


def prestart() -> None:
    """Start the render worker in the background (a GGUF's template will be rendered soon)."""
    _worker.prestart()


class BoundedTemplate:
    """Stands for a compiled untrusted template: ``render`` runs in the worker, on the budget."""

    def __init__(self, source: str) -> None:
        self.source = source

    def render(self, **ctx: Any) -> str:
        reply = _worker.render(self.source, ctx, _budget)
        if "text" in reply:
            return reply["text"]
        raise _exception(reply["kind"], reply["message"])


def bounded_caps(source: str) -> dict[str, bool]:
    """The server's capability probe of an untrusted template, run in the worker on the render
    budget: the probe executes the template too, so a hostile one must not hang it in-process."""
    reply = _worker.render(checked_source(source), {}, _budget, op="caps")
    if "caps" in reply:
        return reply["caps"]
    raise _exception(reply["kind"], reply["message"])


def bounded_thinking(source: str, bos_token: str, eos_token: str, tool_calls: bool) -> bool:
    """Whether the server's auto-parser finds reasoning in an untrusted template
    (``reasoning_analysis.analyze``; ``tool_calls``: its capability probe's), run in the worker
    on the render budget."""
    ctx = {"bos_token": bos_token, "eos_token": eos_token, "tool_calls": tool_calls}
    reply = _worker.render(checked_source(source), ctx, _budget, op="thinking")
    if "thinking" in reply:
        return bool(reply["thinking"])
    raise _exception(reply["kind"], reply["message"])


#: far above any real chat template (the largest published are ~40 KB): the source of a GGUF's
#: template is as untrusted as a ``--template`` file, which ``textfile`` already bounds
MAX_SOURCE_CHARS = 1 << 20


def checked_source(source: str) -> str:
    """An untrusted template's source, refused before compiling when it is over the limit."""
    if len(source) > MAX_SOURCE_CHARS:
        raise TemplateError(f"the chat template is {len(source):,} characters, over the {MAX_SOURCE_CHARS:,} a "
                            "template may have: refused before compiling")
    return source


def _exception(kind: str, message: str) -> Exception:
    """The worker's error as the exception ``templates.render`` expects."""
    import jinja2
    from jinja2.sandbox import SecurityError

    if kind == "raise_exception":
        return RaiseException(message)
    if kind == "syntax":
        return TemplateError(message)
    if kind == "budget":
        return TemplateBudgetError(f"chat template stopped: {message} (render budget {_budget.describe()}; "
                             "--template-timeout / --template-max-mb to change)")
    known = {"TypeError": TypeError, "UndefinedError": jinja2.UndefinedError, "SecurityError": SecurityError}
    if kind in known:
        return known[kind](message)
    return TemplateError(f"chat template failed: {kind}: {message}")
