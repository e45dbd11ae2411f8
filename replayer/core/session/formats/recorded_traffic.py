"""A traffic log written by ``replayer record``: a session whose lines are the requests as sent.

Each logged ``/v1/chat/completions``, ``/v1/messages`` or ``/v1/responses`` request becomes one
turn, in the order the proxy logged them, converted to the chat body the server renders
(``server_conversions``: the server's own Anthropic and Responses conversions). What the
server answered (``timings``, ``id_slot``) is kept per turn as the observed side.

Skipped, each with a warning that reaches every output: requests no server answered (the
upstream was down, the proxy refused the body), bodies that are not JSON or that the
server's conversion refuses, and ``/completion`` requests (a prompt string, not a chat turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.formats import openai_body
from replayer.core.session.model import Session
from replayer.core.session.reader import JsonlStats, iter_jsonl
from replayer.core.session.registry import Head, Importer, jsonl_confidence
from replayer.core.session.server_conversions import CONVERSIONS, LATEST, ConversionError, to_chat

FORMAT = "traffic-log"
#: the keys every line of a traffic log carries (replayer/core/record/traffic_log.py ``Exchange.record``)
_KEYS = ("v", "seq", "endpoint", "body", "body_sha256")


def _is_line(obj: Any) -> bool:
    return isinstance(obj, dict) and all(k in obj for k in _KEYS) and isinstance(obj.get("endpoint"), str)


def detect(objs: list[dict[str, Any]]) -> bool:
    return bool(objs) and all(_is_line(o) for o in objs)


@dataclass
class Observed:
    """What the server reported for one request through the proxy."""

    seq: int
    endpoint: str
    thread: str | None
    status: int | None
    timings: dict[str, Any] | None
    id_slot: int | None
    cache_n: int | None = None  # the line's counts: from ``timings``, else the endpoint's ``usage``
    prompt_n: int | None = None
    sent: float | None = None  # the line's ``time`` (unix seconds), when the proxy got the request
    done: float | None = None  # ``time`` + ``t_total_ms``: when its answer had passed


@dataclass
class Traffic:
    bodies: list[dict[str, Any]] = field(default_factory=list)  # chat bodies, one a turn
    observed: list[Observed] = field(default_factory=list)
    wire: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (endpoint, body) as sent
    warnings: list[str] = field(default_factory=list)
    lines: int = 0


def read_traffic(path: Path, build: int = LATEST) -> Traffic:
    """Every replayable request of the log as the chat body the server rendered for it."""
    jstats = JsonlStats()
    out = Traffic()
    skipped: dict[str, int] = {}

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for rec in iter_jsonl(path, jstats):
        if not _is_line(rec):
            skip("lines that are not traffic-log records")
            continue
        out.lines += 1
        ep = rec["endpoint"]
        if ep in ("/completion", "/completions", "/v1/completions"):
            skip(f"{ep} requests (a prompt string, not a chat turn)")
            continue
        if ep not in CONVERSIONS:
            skip(f"{ep} requests")
            continue
        if rec.get("status") is None or (rec.get("status") == 502 and rec.get("timings") is None
                                         and "upstream" in str(rec.get("error"))):
            skip("requests no server answered")
            continue
        body = rec.get("body")
        if not isinstance(body, dict):
            skip("requests whose body is not a JSON object")
            continue
        try:
            chat = to_chat(ep, body, build)
        except (ConversionError, AttributeError, TypeError) as exc:
            skip(f"requests the server's conversion refuses ({exc})" if isinstance(exc, ConversionError)
                 else "requests the server's conversion refuses")
            continue
        if not openai_body.detect(chat) or not chat["messages"]:
            skip("requests without messages")
            continue
        if isinstance(rec.get("thread"), str):  # the proxy's thread, as a request log names it
            chat = {**chat, "thread": rec["thread"]}
        out.bodies.append(chat)
        out.wire.append((ep, body))
        out.observed.append(Observed(rec["seq"], ep, rec.get("thread"), rec.get("status"),
                                     rec.get("timings") if isinstance(rec.get("timings"), dict) else None,
                                     rec.get("id_slot") if isinstance(rec.get("id_slot"), int) else None,
                                     _int(rec.get("cache_n")), _int(rec.get("prompt_n")), *_times(rec)))
    _, warnings = jstats.import_stats(out.lines)
    out.warnings = warnings + [f"skipped {n} {why}" for why, n in skipped.items()]
    if not out.bodies:
        raise ImportFailed(f"{path} holds no replayable requests" + (f" ({'; '.join(out.warnings)})"
                                                                     if out.warnings else ""))
    return out


def _times(rec: dict[str, Any]) -> tuple[float | None, float | None]:
    """(sent, answered) of a line, in unix seconds; None where the line has no such number."""
    t, total = rec.get("time"), rec.get("t_total_ms")
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return None, None
    ok = isinstance(total, (int, float)) and not isinstance(total, bool) and total >= 0
    return float(t), float(t) + total / 1000 if ok else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def read_bodies(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The turns' bodies and the warnings (what ``session.turns`` reads for an exact replay)."""
    t = read_traffic(path)
    return t.bodies, t.warnings


def load(path: Path, *, images: str = "omit") -> Session:
    t = read_traffic(path)
    s = openai_body.load(path, t.bodies[-1], images=images)
    s.format = FORMAT
    s.stats.lines = t.lines
    s.stats.entries_total = len(t.bodies)
    threads = {o.thread for o in t.observed}
    if len(threads) > 1:
        s.warnings.append(f"{len(threads)} threads in the log (an agent's side requests have their own system "
                          "prompt); every request is replayed in the order sent")
    s.warnings.extend(t.warnings)
    return s


def detect_head(head: Head) -> float:
    return jsonl_confidence(head, detect, 0.97)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images))
