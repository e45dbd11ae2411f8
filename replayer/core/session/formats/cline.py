"""Cline's sessions → chat messages: the CLI's ``<id>.messages.json`` and the VS Code extension's
``tasks/<id>/api_conversation_history.json`` (also Roo Code and Kilo Code, which share it).

Both hold Anthropic-shaped messages (``text``, ``thinking``, ``tool_use`` and ``tool_result``
blocks), which read as an OpenAI body would lose every tool call. The CLI file also stores the
system prompt. What Cline 3.0.65 sends differs from what it stores in two ways, both undone
here: a user prompt stored as ``<user_input mode="act">…</user_input>`` is sent bare, and a
tool result stored as a list of objects is sent as their compact JSON text. A third is the
CLI's message builder's cut of long tool results and replies (``cline_wire``), done here too for
the CLI's files (the VS Code extension's are sent by other code: uncut, unchecked).

Cline's agentic compaction (3.0.65: on by default, when a request would pass 90% of the model's
input window) leaves ``<id>.messages.json`` whole and writes the compacted context beside it,
``<id>.compaction.json``: the summary as a user message (``metadata.kind = compaction_summary``)
and the messages it kept, covering the first ``source_message_count`` stored messages (the last
of them named by ``source_last_message_key``). The next request is that context and the stored
messages after those; the history before it is kept for the requests sent before it. Only the
latest compaction is written (each folds in the summary before it).

A subagent that the ``spawn_agent`` tool starts writes ``agent_<id>.messages.json`` beside the
parent's file (``agent: "subagent"``, ``origin.parentThreadId``), with its task and replies but
no system prompt: the prompt it was sent with is the call's own ``systemPrompt`` argument (3.0.65:
``prompt: Z.systemPrompt``, ``@cline/core`` 0.0.86 ``dist/index.js:209``), read from the parent's
file, and its task is the call's ``task``.

Cline records what its server reported of every request (``RecordedTokens``, set beside the
replay's prediction by the session report). The CLI stamps each assistant message with the
usage of the model call that produced it (``metrics``: ``inputTokens``, ``outputTokens``,
``cacheReadTokens``, ``cacheWriteTokens``, ``cost``; ``@cline/agents`` ``usageDelta``). Its
``inputTokens`` is the AI SDK's ``inputTokens.total`` (``@cline/llms`` ``normalizeUsage``): the
whole prompt, an OpenAI-compatible server's ``prompt_tokens``; ``cacheReadTokens`` is its
``prompt_tokens_details.cached_tokens``, the tokens llama-server reused. The VS Code extensions
(Cline before the SDK, Roo Code, Kilo Code) keep it in ``ui_messages.json`` beside the task:
one ``say: "api_req_started"`` message per API request, its ``text`` the JSON of
``ClineApiReqInfo`` (``tokensIn``, ``tokensOut``, ``cacheWrites``, ``cacheReads``, and in Roo
Code and Kilo Code ``apiProtocol``). Their ``tokensIn`` is the provider's own input count: an
OpenAI-style provider's ``prompt_tokens`` (cached ones included), Anthropic's ``input_tokens``
(cached ones not: the prompt is ``tokensIn + cacheWrites + cacheReads``). ``apiProtocol`` says
which; where it is not written (Cline) the task's ``task_metadata.json`` names the provider.
The requests are matched to the stored responses in order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ReplayerError
from replayer.core.session.formats import cline_wire
from replayer.core.session.model import EarlierHistory, ImportStats, Message, RecordedTokens, Session, ToolCall
from replayer.core.session.reader import json_args, ms_to_s
from replayer.core.session.registry import WHOLE_JSON_LIMIT, Head, Importer, doc_confidence, read_doc
from replayer.core.textfile import read_bytes

FORMAT = "cline"
_USER_INPUT = re.compile(r'\A<user_input(?: mode="[^"]*")?>(.*)</user_input>\Z', re.S)
_BLOCKS = {"text", "thinking", "redacted_thinking", "tool_use", "tool_result", "image", "document"}


def _messages_of(doc: Any) -> list | None:
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        return doc["messages"]
    return doc if isinstance(doc, list) else None


def detect(doc: Any) -> bool:
    """Anthropic block lists under user/assistant roles (at least one block of a kind OpenAI lacks,
    or the CLI's own header fields)."""
    msgs = _messages_of(doc)
    if not msgs or not all(isinstance(m, dict) and m.get("role") in ("user", "assistant") for m in msgs):
        return False
    if isinstance(doc, dict) and ("system_prompt" in doc or doc.get("agent") == "subagent") \
            and ("origin" in doc or "agent" in doc):  # a subagent's file stores no prompt
        return True
    return any(isinstance(m.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking") for b in m["content"])
        for m in msgs)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(b.get("text", "") for b in content)
    return orjson.dumps(content).decode()


def _user(m: dict, ts: float | None, cut: bool = False) -> list[Message]:
    content = m.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out: list[Message] = []
    texts: list[str] = []
    for b in content if isinstance(content, list) else []:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "tool_result":
            c = b.get("content")
            out.append(Message(role="tool", content=_result_text(cline_wire.tool_result_as_sent(c) if cut else c),
                               tool_call_id=str(b.get("tool_use_id", "")), timestamp=ts))
        elif b.get("type") == "text":
            t = b.get("text", "")
            hit = _USER_INPUT.match(t)
            texts.append(hit.group(1) if hit else t)
        elif b.get("type") == "image":
            texts.append("(image omitted: model does not support images)")
    if texts:
        out.append(Message(role="user", content="\n".join(texts), timestamp=ts))
    return out


def _assistant(m: dict, ts: float | None, cut: bool = False) -> Message | None:
    content = m.get("content")
    if isinstance(content, str):
        return Message(role="assistant", content=cline_wire.assistant_text_as_sent(content) if cut else content,
                       timestamp=ts)
    texts, thinking, calls = [], [], []
    for b in content if isinstance(content, list) else []:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text":
            t = b.get("text", "")
            texts.append(cline_wire.assistant_text_as_sent(t) if cut else t)
        elif b.get("type") == "thinking":
            thinking.append(b.get("thinking", ""))
        elif b.get("type") == "tool_use":
            calls.append(ToolCall(id=str(b.get("id", "")), name=str(b.get("name", "")),
                                  arguments=json_args(b.get("input", {}))))
    if not (texts or thinking or calls):
        return None
    return Message(role="assistant", content="".join(texts) or None, reasoning="\n".join(thinking) or None,
                   tool_calls=calls, timestamp=ts)


def _sidecar(f: Path) -> Any:
    """A file beside the session (its compaction, a subagent's or the parent's messages, the
    extension's ``ui_messages.json`` and ``task_metadata.json``), read as the session is: a
    regular file, bounded."""
    return orjson.loads(read_bytes(f, "Cline file", WHOLE_JSON_LIMIT))


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _tokens(prompt: Any, reused: Any, output: Any, written: Any, source: str) -> RecordedTokens | None:
    """One request's counts, when they make sense (a whole prompt, no more reused than it)."""
    p, r = _count(prompt), _count(reused if reused is not None else 0)
    if p is None or r is None or r > p or p == 0:
        return None
    return RecordedTokens(prompt=p, reused=r, output=_count(output), cache_written=_count(written), source=source)


def _cli_recorded(m: dict) -> RecordedTokens | None:
    """The CLI's ``metrics`` of one model call (``inputTokens`` the whole prompt)."""
    x = m.get("metrics")
    if not isinstance(x, dict):
        return None
    return _tokens(x.get("inputTokens"), x.get("cacheReadTokens"), x.get("outputTokens"), x.get("cacheWriteTokens"),
                   "the CLI's metrics (inputTokens, cacheReadTokens)")


_ANTHROPIC_PROVIDERS = {"anthropic"}  # the handlers whose tokensIn leaves the cached tokens out


def _task_provider(task_dir: Path) -> str | None:
    """The provider a VS Code task last ran with (``task_metadata.json``'s ``model_usage``)."""
    try:
        doc = _sidecar(task_dir / "task_metadata.json")
    except (ReplayerError, orjson.JSONDecodeError):
        return None
    usage = doc.get("model_usage") if isinstance(doc, dict) else None
    ids = [u.get("model_provider_id") for u in usage if isinstance(u, dict)] if isinstance(usage, list) else []
    return next((i for i in reversed(ids) if isinstance(i, str)), None)


def _ui_recorded(path: Path, msgs: list, warnings: list[str]) -> dict[int, RecordedTokens]:
    """The VS Code extension's per-request counts (``ui_messages.json``), by ``id`` of the stored
    assistant message that answered the request; empty when the file is absent or does not fit."""
    f = path.with_name("ui_messages.json")
    if not f.is_file():
        return {}
    try:
        ui = _sidecar(f)
    except (ReplayerError, orjson.JSONDecodeError) as exc:
        warnings.append(f"{f.name} could not be read ({exc}): Cline's own token counts are not shown")
        return {}
    infos = []
    for u in ui if isinstance(ui, list) else []:
        if isinstance(u, dict) and u.get("say") == "api_req_started" and isinstance(u.get("text"), str):
            try:
                info = orjson.loads(u["text"])
            except orjson.JSONDecodeError:
                info = None
            infos.append(info if isinstance(info, dict) else {})
    answers = [m for m in msgs if isinstance(m, dict) and m.get("role") == "assistant"]
    if len(infos) != len(answers):  # a cancelled or failed request may have left no response
        infos = [i for i in infos if not (i.get("cancelReason") or i.get("streamingFailedMessage"))]
    if not infos:
        return {}
    if len(infos) != len(answers):
        warnings.append(f"{f.name} records {len(infos)} API request(s) for {len(answers)} stored response(s): "
                        "Cline's own token counts are not matched to the turns")
        return {}
    provider = None if any("apiProtocol" in i for i in infos) else _task_provider(path.parent)
    out: dict[int, RecordedTokens] = {}
    for m, i in zip(answers, infos):
        anthropic = i.get("apiProtocol") == "anthropic" if "apiProtocol" in i else provider in _ANTHROPIC_PROVIDERS
        t_in, reads, writes = _count(i.get("tokensIn")), _count(i.get("cacheReads")) or 0, _count(i.get("cacheWrites"))
        prompt = t_in + reads + (writes or 0) if anthropic and t_in is not None else t_in
        how = ("tokensIn + cacheWrites + cacheReads, Anthropic-style" if anthropic else
               "tokensIn (cached tokens included, OpenAI-style" + ("" if "apiProtocol" in i or provider else
                                                                   ": no apiProtocol or provider recorded") + ")")
        r = _tokens(prompt, reads, i.get("tokensOut"), writes, f"{f.name}'s api_req_started ({how}; reused: cacheReads)")
        if r is not None:
            out[id(m)] = r
    return out


def _converted(msgs: list, cut: bool, recorded: dict[int, RecordedTokens] | None = None) -> list[Message]:
    """Stored messages as Cline sends them (``cut``: as the CLI's message builder cuts long ones),
    each response with the counts Cline kept of its request (the CLI's on the message itself, the
    extension's in ``recorded``, by the stored message's ``id``)."""
    out: list[Message] = []
    for m in msgs:
        if not isinstance(m, dict):
            continue
        ts = ms_to_s(m.get("ts"))
        if m.get("role") == "assistant":
            a = _assistant(m, ts, cut)
            if a is not None:
                a.recorded = _cli_recorded(m) if recorded is None else recorded.get(id(m))
                out.append(a)
        else:
            out.extend(_user(m, ts, cut))
    return out


def _compaction(path: Path, msgs: list, warnings: list[str]) -> tuple[list, int] | None:
    """The compacted context beside a CLI session (``<id>.compaction.json``) and how many stored
    messages it stands for; None when there is none, or it does not fit the stored messages."""
    f = path.with_name(path.name.removesuffix(".messages.json") + ".compaction.json")
    if not path.name.endswith(".messages.json") or not f.is_file():
        return None
    try:
        doc = _sidecar(f)
    except (ReplayerError, orjson.JSONDecodeError) as exc:
        warnings.append(f"{f.name} could not be read ({exc}): the compaction is not applied")
        return None
    kept, n = (doc.get("messages"), doc.get("source_message_count")) if isinstance(doc, dict) else (None, None)
    key = doc.get("source_last_message_key") if isinstance(doc, dict) else None
    last = msgs[n - 1] if isinstance(n, int) and 0 < n <= len(msgs) and isinstance(msgs[n - 1], dict) else None
    if not isinstance(kept, list) or last is None or (isinstance(key, str) and key.startswith("id:")
                                                        and key != f"id:{last.get('id')}"):
        warnings.append(f"{f.name} does not fit the stored messages (source_message_count {n!r}, "
                        f"last {key!r}): the compaction is not applied")
        return None
    return kept, n


def _is_subagent(header: dict) -> bool:
    origin = header.get("origin") if isinstance(header.get("origin"), dict) else {}
    return header.get("agent") == "subagent" or origin.get("mode") == "subagent"


def _first_prompt(msgs: list) -> tuple[str | None, float | None]:
    """The first stored user prompt's text and time."""
    for m in msgs:
        if isinstance(m, dict) and m.get("role") == "user":
            texts = [x.content for x in _user(m, None) if x.role == "user" and isinstance(x.content, str)]
            if texts:
                return texts[0], ms_to_s(m.get("ts"))
    return None, None


def _spawned_with(path: Path, header: dict, msgs: list, warnings: list[str]) -> str | None:
    """A subagent's system prompt: the ``systemPrompt`` of the parent's ``spawn_agent`` call
    whose ``task`` is the subagent's first prompt (of several such calls, the latest made
    before the subagent's first message)."""
    origin = header.get("origin") if isinstance(header.get("origin"), dict) else {}
    parent = origin.get("parentThreadId")
    task, started = _first_prompt(msgs)
    f = path.with_name(f"{parent}.messages.json") if isinstance(parent, str) and "/" not in parent else None
    try:
        doc = _sidecar(f) if f is not None else None
    except (ReplayerError, orjson.JSONDecodeError):
        doc = None
    found = None
    for m in _messages_of(doc) or []:
        ts = ms_to_s(m.get("ts")) if isinstance(m, dict) else None
        for b in m.get("content") if isinstance(m, dict) and isinstance(m.get("content"), list) else []:
            inp = b.get("input") if isinstance(b, dict) and b.get("type") == "tool_use" else None
            if (isinstance(inp, dict) and b.get("name") == "spawn_agent" and inp.get("task") == task
                    and isinstance(inp.get("systemPrompt"), str) and (None in (ts, started) or ts <= started)):
                found = inp["systemPrompt"]
    if found is None:
        warnings.append("a Cline subagent's file stores no system prompt, and the parent's spawn_agent call "
                        f"that gave it ({parent}.messages.json) was not found: the prompt is missing")
    return found


def subagent_files(path: Path, session_id: str | None) -> list[Path]:
    """The files of the subagents the CLI session at ``path`` started: ``agent_*.messages.json``
    beside it whose ``origin.parentThreadId`` is the session, in name order (their ids start
    with the time they were made)."""
    if not session_id or path.name.startswith("agent_") or not path.name.endswith(".messages.json"):
        return []
    out = []
    for f in sorted(path.parent.glob("agent_*.messages.json")):
        try:
            doc = _sidecar(f)
        except (ReplayerError, orjson.JSONDecodeError):
            continue
        origin = doc.get("origin") if isinstance(doc, dict) and isinstance(doc.get("origin"), dict) else {}
        if origin.get("parentThreadId") == session_id:
            out.append(f)
    return out


def load(path: Path) -> Session:
    doc = read_doc(path, detect, "a Cline session")
    msgs = _messages_of(doc) or []
    header = doc if isinstance(doc, dict) else {}
    # the CLI's file (an object with its header); the VS Code extension's bare list (also Roo
    # Code's and Kilo Code's) is sent by other code, whose cuts are unchecked: none is made
    cli = isinstance(doc, dict)
    stats = ImportStats(entries_total=len(msgs), branch_length=len(msgs))
    warnings: list[str] = []
    earlier: list[EarlierHistory] = []
    compacted = _compaction(path, msgs, warnings)
    recorded = None if cli else _ui_recorded(path, msgs, warnings)
    prefix = 0
    if compacted is None:
        out = _converted(msgs, cli, recorded)
    else:
        kept, n = compacted
        stats.compactions_total = stats.compactions_applied = 1
        summary = _converted(kept, cli, recorded)
        out, prefix = summary + _converted(msgs[n:], cli, recorded), len(summary)
        earlier.append(EarlierHistory(messages=_converted(msgs[:n], cli, recorded)))
        stats.branch_length = len(kept) + len(msgs) - n
    origin = header.get("origin") if isinstance(header.get("origin"), dict) else {}
    model = next((m["modelInfo"].get("id") for m in reversed(msgs) if isinstance(m.get("modelInfo"), dict)), None)
    times = [t for t in (ms_to_s(m.get("ts")) for m in msgs) if t]
    sp = header.get("system_prompt")
    sub = _is_subagent(header)
    if sub and not isinstance(sp, str):
        sp = _spawned_with(path, header, msgs, warnings)
    return Session(format=FORMAT, format_version="subagent" if sub else None,
                   agent_version=origin.get("version"), path=str(path),
                   session_id=header.get("sessionId"), model=model, provider="cline",
                   created=min(times) if times else None, updated=max(times) if times else None,
                   messages=out, system_prompt=sp if isinstance(sp, str) else None, stats=stats,
                   compacted_prefix=prefix, earlier=earlier, warnings=warnings)


def detect_head(head: Head) -> float:
    return doc_confidence(head, detect, 0.92)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path))
