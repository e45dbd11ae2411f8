"""A cached tokenizer loaded and run in a process of its own.

Why: ``tokenizers.Tokenizer.from_file`` of a 152k-token vocabulary takes ~0.5 s and holds the
GIL the whole time, so a loader *thread* runs in series with the caller's imports, session
load and render, never beside them: a second ``layout --tokenizer gguf:`` took the sum of the
two (measured 0.70 s + 0.51 s). Loaded in a worker process it loads on the other core while
the caller goes on; each ``encode`` is then one round trip (the text in, the ids back as
32-bit integers), small beside the encoding itself.

The worker only reads the cache entry it is given (a file replayer wrote; a damaged one makes
it say so, and the caller loads or rebuilds in-process as before). It is started with
``children.spawn_tied`` (the kernel kills it with replayer) and stops when its pipe closes.
"""

from __future__ import annotations

import atexit
import subprocess
import sys
import threading
import weakref
from array import array
from pathlib import Path
from typing import Any, Callable

from replayer.core.frames import await_ready, receive_frame, send_frame

READY = b"R"
FAILED = b"F"
#: a worker that has not loaded within this long is given up on (the caller loads in-process)
START_SECONDS = 120.0


class Encoding:
    """What ``Tokenizer.encode`` returns, as far as replayer reads it: the ids."""

    __slots__ = ("ids",)

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class RemoteTokenizer:
    """Stands for the ``tokenizers.Tokenizer`` of one cache entry, loading in its worker from
    construction on. ``fallback`` gives the in-process tokenizer when the worker cannot (it did
    not start, the entry is damaged, it died): every later call then runs in-process."""

    def __init__(self, entry: Path, fallback: Callable[[], Any]) -> None:
        self._fallback = fallback
        self._local: Any = None
        self._lock = threading.Lock()
        self._ready: bool | None = None
        try:
            from replayer.core import children

            self._proc: subprocess.Popen | None = children.spawn_tied(
                [sys.executable, "-m", "replayer.core.prompt.tokenizer_worker", str(entry)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            _started.add(self)
        except OSError:
            self._proc = None

    def _worker(self) -> subprocess.Popen | None:
        """The worker once it has loaded, or None (then the in-process tokenizer is used)."""
        if self._ready is None:
            self._ready = self._proc is not None and await_ready(self._proc, READY, START_SECONDS)
            if not self._ready:
                self.stop()
        return self._proc if self._ready else None

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding | Any:
        with self._lock:
            if self._local is None:
                proc = self._worker()
                if proc is not None:
                    reply = None
                    try:
                        send_frame(proc.stdin, text.encode("utf-8", "surrogatepass"))
                        reply = receive_frame(proc.stdout)
                    except (BrokenPipeError, OSError):
                        pass
                    if reply is not None:
                        return Encoding(array("I", reply).tolist())
                    self.stop()
                self._local = self._fallback()
            return self._local.encode(text, add_special_tokens=add_special_tokens)

    def stop(self) -> None:
        proc, self._proc, self._ready = self._proc, None, False
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


_started: weakref.WeakSet[RemoteTokenizer] = weakref.WeakSet()  # stopped at exit, not kept alive by it


@atexit.register
def _stop_all() -> None:
    for t in list(_started):
        t.stop()


def _serve(entry: str) -> None:
    from tokenizers import Tokenizer

    out = sys.stdout.buffer
    try:
        tok = Tokenizer.from_file(entry)
    except Exception:  # noqa: BLE001 - a damaged entry: the caller loads or rebuilds in-process
        out.write(FAILED)
        out.flush()
        return
    out.write(READY)
    out.flush()
    stdin = sys.stdin.buffer
    while (data := receive_frame(stdin)) is not None:
        ids = tok.encode(data.decode("utf-8", "surrogatepass"), add_special_tokens=False).ids
        send_frame(out, array("I", ids).tobytes())


if __name__ == "__main__":
    _serve(sys.argv[1])
