"""ShareGPT conversations (``from``/``value`` turns, tools as a JSON string).

Tool calls carry no ids in ShareGPT; they are numbered ``call_<n>`` and each
``observation`` answers the oldest unanswered call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ImportFailed
from replayer.core.session.model import ImportStats, Message, Session, ToolCall
from replayer.core.session.reader import json_args
from replayer.core.session import salvage
from replayer.core.session.registry import Head, Importer, doc_confidence, mostly, read_doc

FORMAT = "sharegpt"
_ROLE = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "system": "system", "function_call": "function_call", "observation": "tool", "tool": "tool",
         "function": "tool"}


def _entries(doc: Any) -> list[dict]:
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        return []
    return [d for d in doc if isinstance(d, dict) and isinstance(d.get("conversations"), list)]


def _is_turn(t: Any) -> bool:
    return isinstance(t, dict) and "from" in t and "value" in t


def detect(doc: Any) -> bool:
    """``conversations`` of ``from``/``value`` turns (a few without them are left out by name)."""
    ents = _entries(doc)
    return bool(ents) and mostly(ents[0]["conversations"], _is_turn)


def load(path: Path, doc: Any, *, index: int = 0) -> Session:
    ents = _entries(doc)
    if not ents:
        raise ImportFailed(f"{path} holds no ShareGPT conversations")
    warnings = [f"{len(ents)} conversations in this file; replaying number {index}"] if len(ents) > 1 else []
    entry = ents[index]
    system = entry.get("system")
    tools = None
    if isinstance(entry.get("tools"), str) and entry["tools"].strip():
        try:
            raw = orjson.loads(entry["tools"])
            tools = [t if "function" in t else {"type": "function", "function": t} for t in raw]
        except (orjson.JSONDecodeError, TypeError):
            warnings.append("the tools string is not valid JSON; ignored")
    out: list[Message] = []
    pending: list[str] = []
    n = 0
    for i, turn in enumerate(salvage.admit_all(entry["conversations"], "conversations")):  # each named
        if not _is_turn(turn):
            salvage.skip(turn if isinstance(turn, dict) else f"conversations[{i}]", "a turn without from and value")
            continue
        role = _ROLE.get(str(turn.get("from")), "user")
        value = turn.get("value", "")
        if role == "system":
            system = value
        elif role == "function_call":
            try:
                call = orjson.loads(value)
            except orjson.JSONDecodeError:
                call = {"name": "unknown", "arguments": value}
            cid = f"call_{n}"
            n += 1
            pending.append(cid)
            tc = ToolCall(id=cid, name=str(call.get("name", "")), arguments=json_args(call.get("arguments", {})))
            if out and out[-1].role == "assistant" and not out[-1].tool_calls and out[-1].content is None:
                out[-1].tool_calls.append(tc)
            else:
                out.append(Message(role="assistant", content=None, tool_calls=[tc]))
        elif role == "tool":
            out.append(Message(role="tool", content=value, tool_call_id=pending.pop(0) if pending else None))
        else:
            out.append(Message(role=role, content=value))
    return Session(format=FORMAT, path=str(path), messages=out, system_prompt=system, tools=tools,
                   stats=ImportStats(entries_total=len(entry["conversations"]),
                                     branch_length=len(entry["conversations"])), warnings=warnings)


def detect_head(head: Head) -> float:
    return doc_confidence(head, detect, 0.6)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, read_doc(path, detect, "a ShareGPT file")))
