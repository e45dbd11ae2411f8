"""The traffic log: one JSON line per request the agent sent, written by ``replayer record``.

A line holds the request exactly as the agent sent it (endpoint, parsed body, or its text
when it is not JSON) and what the server answered that a replay needs as the observed
truth: ``timings`` (cache_n, prompt_n, prompt_ms, predicted_ms), ``id_slot``, the status and
any error. A streamed answer's chunks are only kept as they pass (bounded: its last
``RESPONSE_KEEP`` bytes) and read once it has ended: only the SSE events that carry those
fields are parsed, and nothing is scanned per token's chunk on the proxy's path. Header values are never
logged except a short list of harmless ones (no Authorization, x-api-key, cookies).
"""

from __future__ import annotations

import hashlib
from collections import deque
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import orjson

LOG_VERSION = 1
#: the endpoints whose exchanges are logged (llama-server's aliases included)
LOGGED_ENDPOINTS = frozenset({
    "/v1/chat/completions", "/chat/completions", "/completion", "/completions", "/v1/completions",
    "/v1/messages", "/v1/responses", "/responses",
})
#: the only request headers whose values reach the log: nothing that can hold a credential
SAFE_HEADERS = frozenset({"content-type", "user-agent", "anthropic-version", "anthropic-beta", "openai-beta",
                          "accept", "x-stainless-lang", "x-stainless-package-version"})
#: headers that name the agent's session (Codex, Claude Code); hashed into the thread, never logged
SESSION_HEADERS = ("session_id", "session-id", "x-session-id", "x-claude-code-session-id")
#: how much of a non-streamed answer is kept to read its timings (a larger one is logged without them)
RESPONSE_KEEP = 16 * 1024 * 1024
_MARKERS = (b'"timings"', b'"id_slot"', b'"error"', b'"usage"')


def _short_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:12]


def _text_of(content: Any) -> str:
    """The text of a system prompt / message content in any of the three wire formats."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) and isinstance(p.get("text"), str) else ""
                       for p in content)
    return ""


def system_text(endpoint: str, body: Any) -> str:
    """The system prompt of a request body (chat ``system`` message, Anthropic ``system``,
    Responses ``instructions``), '' when there is none."""
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("system"), (str, list)):
        return _text_of(body["system"])
    if isinstance(body.get("instructions"), str):
        return body["instructions"]
    msgs = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(msgs, list):
        for m in msgs:
            if isinstance(m, dict) and m.get("role") in ("system", "developer"):
                return _text_of(m.get("content"))
    if isinstance(body.get("prompt"), str):  # /completion: the prompt's first line stands for its header
        return body["prompt"][:2000]
    return ""


def thread_of(endpoint: str, body: Any, headers: dict[str, str]) -> tuple[str | None, str | None]:
    """Which conversation a request belongs to, as a short hash and what it was told from.

    An explicit session key wins (Codex's ``prompt_cache_key`` and ``session_id`` header,
    Claude Code's ``metadata.user_id``, which ends in its session id); else the system prompt,
    which differs between an agent's main thread and its side requests (titles, summaries)."""
    if isinstance(body, dict):
        key = body.get("prompt_cache_key")
        if isinstance(key, str) and key:
            return _short_hash("key", key), "prompt_cache_key"
        meta = body.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("user_id"), str) and meta["user_id"]:
            return _short_hash("user", meta["user_id"]), "metadata.user_id"
    for h in SESSION_HEADERS:
        if headers.get(h):
            return _short_hash("header", headers[h]), "header"
    sys_text = system_text(endpoint, body)
    if sys_text:
        return _short_hash("system", sys_text), "system prompt"
    return None, None


@dataclass
class ResponseFacts:
    """What a response said that the log keeps, read from its body as it streams past."""

    status: int | None = None
    content_type: str = ""
    stream: bool = False
    n_bytes: int = 0
    n_events: int = 0
    timings: dict[str, Any] | None = None
    id_slot: int | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    _kept: deque[bytes] = field(default_factory=deque)
    _kept_n: int = 0
    _events_dropped: int = 0  # "data:" events of the chunks a long stream dropped
    _cut: bool = False  # the stream's head was dropped (RESPONSE_KEEP)

    def start(self, status: int, content_type: str) -> None:
        self.status = status
        self.content_type = content_type.lower()
        self.stream = "text/event-stream" in self.content_type

    def feed(self, data: bytes) -> None:
        """One piece of the decoded body, kept as it is: nothing is scanned or parsed per chunk (a
        streamed token is one chunk, and this runs between the server's write and the next read).
        ``finish`` reads what was kept; of a stream longer than ``RESPONSE_KEEP`` only its last
        ``RESPONSE_KEEP`` bytes are kept (the fields kept come in its last events)."""
        self.n_bytes += len(data)
        if self.stream:
            self._kept.append(data)
            self._kept_n += len(data)
            if self._kept_n > RESPONSE_KEEP:
                self._drop_oldest()
            return
        if self._kept_n + len(data) <= RESPONSE_KEEP:  # a larger answer is logged without its fields
            self._kept.append(data)
        self._kept_n += len(data)

    def _drop_oldest(self) -> None:
        """A long stream: forget its oldest chunks (their events counted first), keeping the tail."""
        while self._kept_n > RESPONSE_KEEP and len(self._kept) > 1:
            old = self._kept.popleft()
            self._kept_n -= len(old)
            self._events_dropped += old.count(b"data:")
            self._cut = True

    def finish(self) -> None:
        if self.stream:
            raw = b"".join(self._kept)
            self._kept, self._kept_n = deque(), 0
            self.n_events = self._events_dropped + raw.count(b"data:")
            lines = raw.split(b"\n")
            if self._cut:
                lines = lines[1:]  # the first kept chunk may start inside a line
            for line in lines:
                if line.startswith(b"data:") and any(m in line for m in _MARKERS):
                    self._take(line[5:].strip())
            return
        if self._kept_n > RESPONSE_KEEP:
            self.error = self.error or f"response of {self._kept_n} bytes not read for timings"
            return
        raw = b"".join(self._kept)
        self._kept = deque()
        if not raw.strip():
            if self.status is not None and self.status >= 400:
                self.error = f"HTTP {self.status} with an empty body"
            return
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.error = f"HTTP {self.status}: response is not JSON ({raw[:120].decode('utf-8', 'replace')!r})"
            return
        self._fields(doc)
        if self.status is not None and self.status >= 400 and self.error is None:
            self.error = f"HTTP {self.status}"

    def _take(self, payload: bytes) -> None:
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        self._fields(doc)

    def _fields(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            return
        if isinstance(doc.get("timings"), dict):
            self.timings = doc["timings"]
        if isinstance(doc.get("id_slot"), int):
            self.id_slot = doc["id_slot"]
        usage = doc.get("usage")
        if isinstance(usage, dict):  # merged: Anthropic's message_start has the input side, message_delta the output
            self.usage = {**(self.usage or {}), **usage}
        for key in ("response", "message"):  # Responses' response.completed, Anthropic's message_start
            inner = doc.get(key)
            if isinstance(inner, dict):
                self._fields(inner)
        err = doc.get("error")
        if err:
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = f"{'HTTP ' + str(self.status) + ': ' if self.status else ''}{str(msg)[:500]}"


def prompt_counts(timings: dict[str, Any] | None, usage: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """(cache_n, prompt_n) of a response: its ``timings``, else its ``usage`` in the endpoint's
    shape (llama-server's server-task.cpp: Anthropic ``cache_read_input_tokens`` + ``input_tokens``
    (the re-processed part), Responses ``input_tokens`` with ``input_tokens_details.cached_tokens``,
    chat ``prompt_tokens`` with ``prompt_tokens_details.cached_tokens``)."""
    if timings and isinstance(timings.get("cache_n"), int) and isinstance(timings.get("prompt_n"), int):
        return timings["cache_n"], timings["prompt_n"]
    if not usage:
        return None, None
    if isinstance(usage.get("cache_read_input_tokens"), int) and isinstance(usage.get("input_tokens"), int):
        return usage["cache_read_input_tokens"], usage["input_tokens"]
    for total, details in (("input_tokens", "input_tokens_details"), ("prompt_tokens", "prompt_tokens_details")):
        d = usage.get(details)
        if isinstance(usage.get(total), int) and isinstance(d, dict) and isinstance(d.get("cached_tokens"), int):
            return d["cached_tokens"], usage[total] - d["cached_tokens"]
    return None, None


@dataclass
class Exchange:
    """One request through the proxy, becoming one log line when it ends."""

    seq: int
    method: str
    target: str
    headers: dict[str, str]
    body_raw: bytes
    t_start: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)
    t_first_byte: float | None = None
    response: ResponseFacts = field(default_factory=ResponseFacts)
    error: str | None = None

    @property
    def endpoint(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def logged(self) -> bool:
        return self.endpoint in LOGGED_ENDPOINTS

    def record(self) -> dict[str, Any]:
        body: Any = None
        body_text: str | None = None
        if self.body_raw:
            try:
                body = orjson.loads(self.body_raw)
            except orjson.JSONDecodeError:
                body_text = self.body_raw.decode("utf-8", "replace")
        thread, thread_from = thread_of(self.endpoint, body, self.headers)
        r = self.response
        cache_n, prompt_n = prompt_counts(r.timings, r.usage)
        now = time.perf_counter()
        rec: dict[str, Any] = {
            "v": LOG_VERSION, "seq": self.seq, "time": round(self.t_start, 6), "method": self.method,
            "endpoint": self.endpoint, "query": self.target.partition("?")[2] or None,
            "headers": {k: v for k, v in self.headers.items() if k in SAFE_HEADERS},
            "body": body, "body_bytes": len(self.body_raw),
            "body_sha256": hashlib.sha256(self.body_raw).hexdigest(),
            "stream": bool(isinstance(body, dict) and body.get("stream")),
            "thread": thread, "thread_from": thread_from,
            "status": r.status, "cache_n": cache_n, "prompt_n": prompt_n, "timings": r.timings,
            "id_slot": r.id_slot, "usage": r.usage,
            "response_bytes": r.n_bytes, "response_events": r.n_events if r.stream else None,
            "t_first_byte_ms": round((self.t_first_byte - self.t0) * 1000, 3) if self.t_first_byte else None,
            "t_total_ms": round((now - self.t0) * 1000, 3),
            "error": self.error or r.error,
        }
        if body_text is not None:
            rec["body_text"] = body_text
        return rec


class TrafficLog:
    """An append-only JSONL file; each line is written whole with one ``write`` on an
    ``O_APPEND`` descriptor, so lines never interleave or get lost between requests.
    ``on_write`` sees each record once it is on disk (``replayer watch`` queues it there: it is
    called on the proxy's event loop, so it must not block)."""

    def __init__(self, path: Path, on_write: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.lines = 0
        self.on_write = on_write

    def write(self, rec: dict[str, Any]) -> None:
        data = memoryview(orjson.dumps(rec) + b"\n")
        while data:
            n = os.write(self.fd, data)
            data = data[n:]
        self.lines += 1
        if self.on_write is not None:
            self.on_write(rec)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
