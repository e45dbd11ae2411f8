"""Qwen Code chats (``~/.qwen/projects/<cwd>/chats/<id>.jsonl``) → chat messages.

Qwen Code (a Gemini CLI fork) writes one record a line, linked by ``parentUuid`` like Claude
Code, but its messages are Gemini ``Content``: ``{"role": "user"|"model", "parts": [...]}``
with ``text`` parts (``thought: true`` for reasoning), ``functionCall`` and
``functionResponse`` parts. ``system`` records (telemetry, attribution snapshots) are not
sent. What Qwen Code adds at send time (its system prompt, ``<system-reminder>`` parts with
the skills listing and the date) is not stored; a capture supplies the prompt and tools.
A ``chat_compression`` record replaces the history sent from then on; the records before it
stay in the chat, the history each request before it was sent with (``Session.earlier``). Its
summarization request is that whole history, then Qwen Code's summarization prompt (its code:
from a capture) as one more user message, with the conversation's prompt and tools; a
compression starts no run, so no date reminder is placed (``summarize``).

A subagent that the ``agent`` tool starts writes its own transcript,
``<project>/subagents/<session id>/agent-<type>-<call id>.jsonl`` (records with ``agentId``,
``agentName`` and ``isSidechain``); it holds the task and the subagent's replies only: not the
subagent's own system prompt and tools, nor the ``<system-reminder>`` parts (skills listing,
environment) sent before the task, so its requests cannot be rebuilt as sent from it alone (a
warning says so); ``replayer agents capture qwen`` runs a subagent too and keeps them by the
type the file records (``agentName``, ``Session.subagent_type``), and the rebuild uses them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.session.branch import path_to_root
from replayer.core.session.model import EarlierHistory, Message, Session, Summarization, ToolCall, Usage
from replayer.core.session.reader import function_response_text, iso_to_s, json_args, read_records
from replayer.core.session.registry import Head, Importer, is_one_of, jsonl_confidence

FORMAT = "qwen-code"
TYPES = {"user", "assistant", "tool_result", "system"}


def _parts(r: dict) -> list[dict]:
    msg = r.get("message")
    parts = msg.get("parts") if isinstance(msg, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def detect(objs: list[dict[str, Any]]) -> bool:
    """Claude-Code-like records whose messages are Gemini ``parts`` (or that carry Qwen's own fields)."""
    return any("sessionId" in o and "uuid" in o and is_one_of(o.get("type"), TYPES)
               and (_parts(o) or "systemPayload" in o or o.get("type") == "tool_result") for o in objs)



def _messages(r: dict, ts: float | None) -> list[Message]:
    t = r.get("type")
    parts = _parts(r)
    if t == "assistant":
        texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
        thoughts = [p["text"] for p in parts if isinstance(p.get("text"), str) and p.get("thought")]
        calls = [ToolCall(id=str(fc.get("id", "")), name=str(fc.get("name", "")), arguments=json_args(fc.get("args", {})))
                 for fc in (p.get("functionCall") for p in parts) if isinstance(fc, dict)]
        if not (texts or calls or thoughts):
            return []
        return [Message(role="assistant", content="".join(texts) or None, reasoning="".join(thoughts) or None,
                        tool_calls=calls, timestamp=ts)]
    out = [Message(role="tool", content=function_response_text(fr.get("response")), tool_call_id=str(fr.get("id", "")),
                   name=fr.get("name"), timestamp=ts)
           for fr in (p.get("functionResponse") for p in parts) if isinstance(fr, dict)]
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
    if texts:
        out.append(Message(role="user", content="\n".join(texts), timestamp=ts))
    return out


def _compressed(r: dict) -> list[Message] | None:
    """The history a ``chat_compression`` record (``/compress`` or the automatic compression)
    replaced the chat's with, ``systemPayload.compressedHistory``: the summary as a user message
    (``<state_snapshot>…``) and a model reply Qwen Code wrote itself ("Got it. Thanks for the
    additional context!"), which answered no request (hence ``compacted_prefix``); None for a
    compression that kept nothing (a failed one writes no history)."""
    payload = r.get("systemPayload") if isinstance(r.get("systemPayload"), dict) else {}
    history = payload.get("compressedHistory")
    if not isinstance(history, list) or not history:
        return None
    ts = iso_to_s(r.get("timestamp"))
    out: list[Message] = []
    for c in history:
        if isinstance(c, dict):
            out.extend(_messages({"type": "assistant" if c.get("role") == "model" else "user", "message": c}, ts))
    return out


def load(path: Path) -> Session:
    records, stats, warnings = read_records(path, "Qwen Code")
    by_uuid = {r["uuid"]: r for r in records if isinstance(r.get("uuid"), str)}
    for r in records:
        if not is_one_of(r.get("type"), TYPES):
            stats.count_unknown(r.get("type"))
    leaf = next((r for r in reversed(records) if isinstance(r.get("uuid"), str)), None)
    chain = path_to_root(leaf, by_uuid, id_key="uuid", parent_key="parentUuid") if leaf else []
    stats.branch_length = len(chain)
    messages: list[Message] = []
    earlier: list[EarlierHistory] = []
    usage = Usage()
    kept = 0
    for r in chain:
        if r.get("type") == "system" and r.get("subtype") == "chat_compression":
            stats.compactions_total += 1
            compressed = _compressed(r)
            if compressed is not None:  # the history Qwen Code sends from here on; the one it sent
                # until then is kept: its requests are turns too
                earlier.append(EarlierHistory(messages=messages, compacted_prefix=kept, summarization=Summarization(
                    upto=len(messages), reply=compressed[0].model_copy(update={"role": "assistant"}) if compressed else None,
                    timestamp=iso_to_s(r.get("timestamp")))))
                messages, kept = compressed, len(compressed)
                stats.compactions_applied = 1
        if r.get("type") not in ("user", "assistant", "tool_result"):
            continue
        messages.extend(_messages(r, iso_to_s(r.get("timestamp"))))
        u = r.get("usageMetadata")
        if isinstance(u, dict):
            usage = Usage(input_tokens=u.get("promptTokenCount"), output_tokens=u.get("candidatesTokenCount"),
                          cache_read_tokens=u.get("cachedContentTokenCount"), context_tokens=u.get("promptTokenCount"))
    times = [t for t in (iso_to_s(r.get("timestamp")) for r in chain) if t]
    model = next((r.get("model") for r in reversed(chain) if r.get("model")), None)
    warnings.append("Qwen Code adds <system-reminder> parts (skills listing, date) at send time; they are not stored")
    agent = next((r.get("agentName") for r in chain if r.get("isSidechain") and r.get("agentName")), None)
    if agent:
        warnings.append(f"a Qwen Code subagent's transcript ({agent}): its system prompt, tools and the "
                        "<system-reminder> parts sent before its task are not stored (`replayer agents "
                        "capture qwen` captures them for its type)")
    return Session(format=FORMAT, format_version="subagent" if agent else None, subagent_type=agent,
                   agent_version=next((r.get("version") for r in reversed(chain) if r.get("version")), None),
                   path=str(path), session_id=next((r.get("sessionId") for r in chain if r.get("sessionId")), None),
                   cwd=next((r.get("cwd") for r in reversed(chain) if r.get("cwd")), None), provider="openai",
                   model=model, created=min(times) if times else None, updated=max(times) if times else None,
                   messages=messages, compacted_prefix=kept, earlier=earlier, usage=usage, stats=stats, warnings=warnings)


def subagent_files(path: Path, session_id: str | None) -> list[Path]:
    """The transcripts of the subagents the chat at ``path`` (``<project>/chats/<id>.jsonl``)
    started: ``<project>/subagents/<id>/agent-*.jsonl``, in name order."""
    if not session_id or path.parent.name != "chats":
        return []
    return sorted((path.parent.parent / "subagents" / session_id).glob("agent-*.jsonl"))


def detect_head(head: Head) -> float:
    return jsonl_confidence(head, detect, 0.95)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path))
