"""What a llama-server did with each completion request, read from its own log: the observed side
of a ``--log-prompts-dir`` folder replayed as a session.

The server writes the folder's file for a request before it queues the request's task
(tools/server/server-context.cpp:4096-4104 in 9859: ``handle_completions_impl``), and task ids
grow with arrival, so the *k*-th completion task of the log is the *k*-th prompt of the folder
when both come from one run of the server. Per task the log says (``engine.logparse`` reads the
lines, ``server.logfacts`` the slot):

- the slot that ran it: ``processing task`` (``SLT_INF``, 11434 server-context.cpp:1962), on
  every verbosity;
- ``prompt_n`` and ``prompt_ms``: ``prompt eval time = X ms / N tokens`` (``print_timings``,
  ``SLT_INF``, 11434 server-context.cpp:680-682) — the same ``stats`` the answer's ``timings``
  carry;
- ``cache_n``: the first batch start, ``cached n_tokens = S, memory_seq_rm [S, end)`` (``SLT_TRC``,
  11434 server-context.cpp:3672; ``n_tokens = S`` in older builds), and the prompt's size,
  ``new prompt, … task.n_tokens = N`` (``SLT_TRC``, :3358). Both are trace lines: only a log
  written with ``-lv 4`` has them, and without them ``cache_n`` is not known (None, said so);
- the batches (each batch start), the checkpoints created, erased and restored, and whether it
  was "forcing full prompt re-processing".

Two shapes are read: the text of ``--log-file`` / stderr (with or without ``--log-prefix`` and
``--log-timestamps``), and ``--log-jsonl`` (11434 common/arg.cpp:3897; one object a line,
``{"type": "log", "time": µs, "level", "msg"}``, common/log.cpp:107-121), whose ``msg`` is the
same text. A server that restarted in the log starts its task ids again: only the last run's
tasks are the folder's (a folder is one run's, as the server names its files by its own clock).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from replayer.core.engine.logparse import FULL_REPROCESS, parse_line, strip_colour
from replayer.core.errors import ImportFailed

#: a log larger than this is not read (a month of a busy server's -lv 4 is under it)
MAX_LOG_BYTES = 4 * 1024 * 1024 * 1024
_TASK = re.compile(r"slot\s+.{1,12}?:\s+id\s+(\d+)\s+\|\s+task\s+(\d+)\s+\|\s+(.*)$")
#: one line per server start: ``SRV_INF("listening on %s")`` (9859 tools/server/server.cpp:429, 11434 :526)
_START = re.compile(r"srv\s+.{1,12}?:\s+listening on ")
#: a task the server stopped before it answered it: its reader went away (the client disconnected,
#: or the answer failed, e.g. a 500 on output the chat parser refused) — ``SRV_WRN("cancel task,
#: id_task = %d")``, server_response_reader::stop (9859 and 10001 tools/server/server-queue.cpp:449)
_CANCEL = re.compile(r"srv\s+.{1,12}?:\s+cancel task, id_task = (\d+)")


@dataclass
class LoggedRequest:
    """One completion task as the server's log tells it."""

    task: int
    slot: int | None = None
    n_tokens: int | None = None  # the prompt's tokens ("new prompt", -lv 4)
    cache_n: int | None = None  # the first batch start (-lv 4)
    prompt_n: int | None = None
    prompt_ms: float | None = None
    batch_starts: list[int] = field(default_factory=list)
    checkpoints_created: int = 0
    checkpoints_erased: int = 0
    restored: bool = False
    full_reprocess: bool = False
    cancelled: bool = False  # stopped before its answer: no 200 of the proxy's is this task's

    @property
    def timings(self) -> dict[str, float | int] | None:
        """The counts in the shape of an answer's ``timings`` (what the traffic log's side holds)."""
        if self.prompt_n is None:
            return None
        out: dict[str, float | int] = {"prompt_n": self.prompt_n}
        if self.cache_n is not None:
            out["cache_n"] = self.cache_n
        if self.prompt_ms is not None:
            out["prompt_ms"] = self.prompt_ms
        return out


@dataclass
class ServerLog:
    path: Path
    shape: str  # "text" | "jsonl"
    requests: list[LoggedRequest] = field(default_factory=list)
    starts: int = 0  # server starts seen (a restart begins the task ids again)
    traced: bool = False  # the log has the -lv 4 lines (cache_n is known)
    warnings: list[str] = field(default_factory=list)


def _ts(us: int) -> str:
    """A JSONL entry's µs as the text log's ``M.SS.mmm.uuu`` prefix (``logparse.parse_ts``)."""
    return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"


def text_lines(raw: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """(shape, line) for every line of a text or ``--log-jsonl`` log, a JSONL entry's ``msg`` as the
    text line it would have been (its lines, each with the entry's time)."""
    for b in raw:
        s = b.strip()
        if s.startswith(b"{"):
            try:
                obj = orjson.loads(s)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("msg"), str):
                t = obj.get("time")
                prefix = _ts(t) + " " if isinstance(t, int) and not isinstance(t, bool) and t > 0 else ""
                for part in obj["msg"].splitlines():
                    yield "jsonl", prefix + part
                continue
            if isinstance(obj, dict):  # a typed JSON entry (LOG_JSON: the memory breakdown), nothing of a task
                yield "jsonl", ""
                continue
        yield "text", b.decode("utf-8", "replace").rstrip("\r\n")


def read_server_log(path: str | Path) -> ServerLog:
    """Every completion task of the log's last server run, in task order."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ImportFailed(f"{p} is not a file (give the server's --log-file, its stderr, or its --log-jsonl output)")
    if p.stat().st_size > MAX_LOG_BYTES:
        raise ImportFailed(f"{p} is over {MAX_LOG_BYTES >> 30} GiB: not read")
    try:
        fh = open(p, "rb")
    except OSError as exc:
        raise ImportFailed(f"cannot read {p}: {exc.strerror or exc}") from None
    with fh:
        log = read_lines(text_lines(fh), p)
    if not log.requests:
        raise ImportFailed(f"{p} holds no completion task of llama-server (no 'processing task' line)")
    if log.starts > 1:
        log.warnings.append(f"the server started {log.starts} times in {p.name}: its last run's tasks are read")
    if not log.traced:
        log.warnings.append(f"{p.name} has no -lv 4 lines: the server's cache_n is not known (prompt_n and "
                            "prompt_ms are), run it with -lv 4 to see what it reused")
    return log


def read_lines(lines: Iterable[tuple[str, str] | str], path: Path | None = None) -> ServerLog:
    """The tasks of log lines already read: (shape, line) pairs as ``text_lines`` gives them, or
    plain text lines (a running server's stderr, as the live engine keeps it)."""
    reader = TaskReader()
    for item in lines:
        reader.feed(item)
    return reader.log(path)


class TaskReader:
    """Completion tasks as the log's lines come, one at a time: a whole file (``read_lines``) or
    a running server's log followed while it is written (``record.log_follow``)."""

    def __init__(self) -> None:
        self.shapes: dict[str, int] = {}
        self.by_task: dict[int, LoggedRequest] = {}  # the current server run's tasks
        self.order: list[LoggedRequest] = []  # every task in the order it started, across restarts
        self.starts = 0
        self.traced = False

    def feed(self, item: tuple[str, str] | str) -> None:
        shape, line = item if isinstance(item, tuple) else ("text", item)
        self.shapes[shape] = self.shapes.get(shape, 0) + 1
        if _START.search(line):
            self.starts += 1
            self.by_task, self.traced = {}, False  # a new run: its task ids start again, the folder is the last run's
            return
        m = _TASK.search(strip_colour(line))
        if m is None:
            c = _CANCEL.search(line)
            if c is not None and int(c.group(1)) in self.by_task:
                self.by_task[int(c.group(1))].cancelled = True
            return
        slot, task, text = int(m.group(1)), int(m.group(2)), m.group(3)
        req = self.by_task.get(task)
        if req is None:
            if not text.startswith("processing task"):
                return  # a line of a task whose start is not in the log (or of no task: id -1)
            req = self.by_task[task] = LoggedRequest(task, slot)
            self.order.append(req)
        if FULL_REPROCESS in text:
            req.full_reprocess = True
        self.traced = _fact(req, parse_line(line)) or self.traced

    def log(self, path: Path | None = None) -> ServerLog:
        """The last server run's tasks, in task order."""
        shape = max(self.shapes, key=lambda k: self.shapes[k]) if self.shapes else "text"
        log = ServerLog(path or Path("-"), shape, starts=self.starts, traced=self.traced)
        log.requests = [self.by_task[t] for t in sorted(self.by_task)]
        return log


def _fact(req: LoggedRequest, fact) -> bool:
    """Add one parsed line to its task; True for a trace (-lv 4) line."""
    if fact is None:
        return False
    if fact.kind == "new_prompt":
        req.n_tokens = fact.values[0]
        return True
    if fact.kind == "batch_start":
        if req.cache_n is None:
            req.cache_n = fact.values[0]
        req.batch_starts.append(fact.values[0])
        return True
    if fact.kind == "prompt_eval" and req.prompt_n is None:
        req.prompt_ms, req.prompt_n = fact.values
    elif fact.kind == "created":
        req.checkpoints_created += 1
    elif fact.kind == "erased":
        req.checkpoints_erased += 1
    elif fact.kind == "restored":
        req.restored = True
    return False


#: the names a server's log beside a ``--log-prompts-dir`` folder D is looked for under, in D's
#: parent (``{}`` is D's name), besides any file in D that is not one of its prompts
BESIDE_NAMES = ("{}.log", "{}.jsonl", "{}.log.jsonl", "server.log", "server.jsonl", "llama-server.log",
                "llama-server.jsonl")


def log_beside(folder: str | Path, prompt_name) -> Path | None:
    """The server's log that sits with a prompt folder, for the observed side without
    ``--observed``: a file in the folder that is not a prompt (``prompt_name`` tells them), or one
    of ``BESIDE_NAMES`` next to it, that holds the server's completion tasks. None when there is
    none; two of them is a one-line error (which one is the folder's is the user's to say)."""
    d = Path(folder).expanduser()
    candidates: list[Path] = []
    try:
        candidates += sorted(p for p in d.iterdir() if not prompt_name(p.name) and p.is_file())
    except OSError:
        return None
    candidates += [d.parent / n.format(d.name) for n in BESIDE_NAMES if (d.parent / n.format(d.name)).is_file()]
    found = []
    for c in dict.fromkeys(candidates):
        try:
            read_server_log(c)
        except ImportFailed:
            continue  # not a server's log (a note, the user's own file): not the observed side
        found.append(c)
    if len(found) > 1:
        raise ImportFailed(f"{d} has {len(found)} server logs beside it ({', '.join(str(f) for f in found)}): "
                           "say which one is its server's with --observed FILE")
    return found[0] if found else None

