"""``replayer watch --server-log FILE``: the upstream server's own log, followed while the watch
runs, as the observed side of what the answers do not say.

An answer says its ``timings`` (``cache_n``, ``prompt_n``, ``prompt_ms``) but not always the
slot the server ran it on (b9859's answers carry no ``id_slot``), and never whether the server
forced a full re-processing or how many batches it took. Its log does, per task
(``server_log.TaskReader``: ``processing task`` names the slot on every verbosity; ``-lv 4``
adds the batches and the first batch's start, the ``cache_n``).

Which task is which request: the server starts a task per completion request it accepted, in
the order they arrived, and the proxy logs its requests in the same order, so the next task
of the log is the next request's. A task started by a request that did not pass the proxy
(another client on the same server) is told apart by its size: when both the answer and the
task have a ``prompt_n``, the first task from here (within ``WINDOW``) whose ``prompt_n`` is
the answer's — and whose ``cache_n`` is too, when both say one (``-lv 4``): two clients' requests
of the same new-token count are still told apart by what each reused — is the one, and the tasks
before it are skipped. A task the server cancelled before its answer (``cancel task``: an
answer that failed after the prefill, a client that went away) is no whole answer's, and is the
task of the next failed one (a 500, or a stream cut short): its prefill still changed the
server's slot, so the prediction simulates it too. The file is read from where it
ended when the watch started: the tasks of the server's earlier requests are not this watch's.

The server writes its log from a thread of its own (common/log.cpp's worker), so a task's last
line can reach the file a moment after the answer reached the client: a request waits up to
``WAIT_S`` for its task, and is shown without the log's facts when none comes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from replayer.core.errors import ReplayerError
from replayer.core.record.server_log import LoggedRequest, TaskReader, text_lines
from replayer.core.record.traffic_log import LOGGED_ENDPOINTS

WINDOW = 8  # tasks of other clients skipped at most between two of the watch's requests
WAIT_S = 2.0
READ_LIMIT = 64 * 1024 * 1024  # read a growing log by pieces of at most this


class LogFollower:
    """The tasks a running llama-server writes to its log from now on, handed out one per
    completion request of the traffic log (``task_for``)."""

    def __init__(self, path: str | Path, wait_s: float = WAIT_S) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise ReplayerError(f"--server-log {self.path} is not a file (give the server's --log-file, "
                                "or the file its stderr or --log-jsonl goes to)")
        try:
            self._fh = open(self.path, "rb")
        except OSError as exc:
            raise ReplayerError(f"cannot read --server-log {self.path}: {exc.strerror or exc}") from None
        self._fh.seek(0, 2)  # the watch's requests start now
        self.wait_s = wait_s
        self.reader = TaskReader()
        self._partial = b""
        self.used = 0  # tasks of ``reader.order`` matched or skipped so far
        self.skipped = 0  # tasks of the log no request of the watch was matched to

    def _read(self) -> None:
        data = self._fh.read(READ_LIMIT)
        if not data:
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line still being written
        for item in text_lines(lines):
            self.reader.feed(item)

    def task_for(self, rec: dict[str, Any]) -> LoggedRequest | None:
        """The task of one traffic-log record, or None: the request started no task (not a
        completion, refused before one), or none of the log's next tasks is its (yet)."""
        if rec.get("endpoint") not in LOGGED_ENDPOINTS or rec.get("status") not in (200, 500):
            return None  # refused before a task (4xx), or the proxy's own answer (the upstream down)
        failed = rec.get("status") != 200 or bool(rec.get("error"))  # a 500, or a stream cut short
        want = rec.get("prompt_n") if isinstance(rec.get("prompt_n"), int) else None
        cached = rec.get("cache_n") if isinstance(rec.get("cache_n"), int) else None
        deadline = time.monotonic() + self.wait_s
        while True:
            self._read()
            found = self._match(want, final=time.monotonic() >= deadline, cached=cached, failed=failed)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def _match(self, want: int | None, final: bool, cached: int | None = None,
               failed: bool = False) -> LoggedRequest | None:
        tasks = self.reader.order[self.used:self.used + WINDOW]
        for k, task in enumerate(tasks):
            if task.cancelled != failed:
                continue  # a whole answer's task was not cancelled, a failed one's was
            if want is None or (task.prompt_n == want and (cached is None or task.cache_n is None
                                                           or task.cache_n == cached)):
                self.skipped += k
                self.used += k + 1
                return task
            if task.prompt_n is None and not final:
                return None  # its timings line is not in the file yet: wait for it before looking further
        return None

    def close(self) -> None:
        self._fh.close()


def with_task(rec: dict[str, Any], task: LoggedRequest | None) -> dict[str, Any]:
    """The record with what the log adds (a copy; the traffic log on disk is not changed):
    ``server_log`` holds the task's facts, and the slot and counts the answer did not give are
    the log's."""
    if task is None:
        return rec
    out = dict(rec)
    out["server_log"] = {"task": task.task, "slot": task.slot, "n_tokens": task.n_tokens, "cache_n": task.cache_n,
                         "prompt_n": task.prompt_n, "batches": len(task.batch_starts),
                         "checkpoints_created": task.checkpoints_created, "restored": task.restored,
                         "full_reprocess": task.full_reprocess}
    if not isinstance(rec.get("id_slot"), int):
        out["id_slot"] = task.slot
    if not isinstance(rec.get("cache_n"), int) and task.cache_n is not None and task.prompt_n is not None:
        out["cache_n"], out["prompt_n"] = task.cache_n, task.prompt_n
    return out
