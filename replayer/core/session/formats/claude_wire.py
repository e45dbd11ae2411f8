"""Claude Code's own record of what it sent (2.1.3xx): ``api-request`` records in the transcript.

Newer Claude Code writes, beside the conversation, each request of the main thread as an
``api-request`` record: ``base`` (an earlier request's ``id``) and ``keep`` (how many of its
messages this one starts with), then ``tail`` — the hashes of the messages that follow, each
stored once as an ``api-request-blob`` — and a ``shapeHash`` naming an ``api-request-shape``
record with the system blocks and tools. A message already in the conversation records is not
stored again: its hash is the SHA-256 of its sorted, compact JSON (checked against the blobs
and the wire of Claude Code 2.1.332), so it is found by hashing the conversation's own
messages in their wire form. From these the last request is rebuilt exactly as
sent, send-time additions included (the date and attribution ``<system-reminder>``, the
mid-conversation ``system`` message with the agent and skill listings), which the
conversation records alone cannot show.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class WireLog:
    messages: list[dict[str, Any]]  # the last main-thread request's messages (Anthropic shape)
    system: list[dict[str, Any]] = field(default_factory=list)  # its system blocks
    tools: list[dict[str, Any]] = field(default_factory=list)  # its tools (Anthropic shape)
    after: int = 0  # file position of that request: what follows it is the reply to it
    requests: int = 0


def _main(r: dict) -> bool:
    thread = r.get("thread")
    return not isinstance(thread, dict) or thread.get("type") in (None, "none")


def request_times(records: list[dict]) -> list[str | None]:
    """The timestamp of each main-thread ``api-request`` record, in file order: when each request
    was sent (a subagent's own file holds only its thread's)."""
    return [r.get("timestamp") for r in records if r.get("type") == "api-request" and _main(r)]


def message_hash(message: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(message, separators=(",", ":"), sort_keys=True,
                                     ensure_ascii=False).encode()).hexdigest()


def _conversation_messages(records: list[dict]) -> dict[str, dict[str, Any]]:
    """The conversation records' messages in their wire form, by hash: a response's blocks
    merged by ``message.id``, a user record's content as stored (and as one text block)."""
    out: dict[str, dict[str, Any]] = {}
    groups: dict[str, list] = {}
    for r in records:
        msg = r.get("message") if isinstance(r.get("message"), dict) else {}
        content = msg.get("content")
        if r.get("type") == "assistant" and isinstance(msg.get("id"), str) and isinstance(content, list):
            groups.setdefault(msg["id"], []).extend(content)
        elif r.get("type") == "user" and content is not None:
            for m in ({"role": "user", "content": content},
                      {"role": "user", "content": [{"type": "text", "text": content}]} if isinstance(content, str)
                      else None):
                if m is not None:
                    out[message_hash(m)] = m
    for blocks in groups.values():
        m = {"role": "assistant", "content": blocks}
        out[message_hash(m)] = m
    return out


def read(records: list[dict]) -> WireLog | None:
    """The last main-thread request as sent, or None when the file has no (complete) wire records."""
    if not any(r.get("type") == "api-request" for r in records):
        return None
    blobs: dict[Any, Any] = _conversation_messages(records)
    blobs.update({r.get("hash"): r.get("message") for r in records if r.get("type") == "api-request-blob"})
    shapes = {r.get("shapeHash"): r.get("shape") for r in records if r.get("type") == "api-request-shape"}
    reqs = [(k, r) for k, r in enumerate(records) if r.get("type") == "api-request" and _main(r)]
    if not reqs:
        return None
    by_id = {r.get("id"): r for _, r in reqs}
    memo: dict[str, list[dict] | None] = {}

    def messages_of(req: dict, depth: int = 0) -> list[dict] | None:
        rid = req.get("id")
        if rid in memo:
            return memo[rid]
        memo[rid] = None  # a cycle of bases reads as missing
        prefix: list[dict] = []
        keep = req.get("keep") if isinstance(req.get("keep"), int) else 0
        if keep:
            base = by_id.get(req.get("base"))
            got = messages_of(base, depth + 1) if base is not None and depth < 10000 else None
            if got is None or len(got) < keep:
                return None
            prefix = got[:keep]
        tail = req.get("tail") if isinstance(req.get("tail"), list) else None
        if tail is None or any(not isinstance(blobs.get(h), dict) for h in tail):
            return None
        memo[rid] = prefix + [blobs[h] for h in tail]
        return memo[rid]

    pos, last = reqs[-1]
    msgs = messages_of(last)
    if msgs is None:
        return None
    shape = shapes.get(last.get("shapeHash")) or {}
    system = shape.get("system") if isinstance(shape.get("system"), list) else []
    tools = shape.get("tools") if isinstance(shape.get("tools"), list) else []
    return WireLog(msgs, [b for b in system if isinstance(b, dict)], [t for t in tools if isinstance(t, dict)],
                   pos, len(reqs))


def system_text(blocks: list[dict[str, Any]]) -> str | None:
    """The system blocks as one prompt, joined as llama-server joins them (with nothing between:
    ``server_chat_convert_anthropic_to_oai`` appends each block's text)."""
    return "".join(b.get("text", "") for b in blocks if isinstance(b.get("text"), str)) if blocks else None


BILLING = "x-anthropic-billing-header:"
#: the salt of Claude Code's prompt fingerprint (2.1.332's ``L6i``)
_FINGERPRINT_SALT = "59cf53e54c78"


def fingerprint(first_prompt: str, version: str) -> str:
    """Claude Code's 3-hex-digit fingerprint of a conversation (the ``NNN`` of ``cc_version=2.1.332.NNN``):
    SHA-256 of a salt, the characters at 4, 7 and 20 of its first user prompt ("0" past the end;
    JavaScript string indices, UTF-16 code units) and the version. Read from 2.1.332's bundle and
    checked against its requests: a prompt, a compaction summary, a subagent's prompt."""
    units = first_prompt.encode("utf-16-le", "surrogatepass")
    picked = "".join(units[2 * i:2 * i + 2].decode("utf-16-le", "replace") if 2 * i < len(units) else "0"
                     for i in (4, 7, 20))
    return hashlib.sha256(f"{_FINGERPRINT_SALT}{picked}{version}".encode("utf-8", "replace")).hexdigest()[:3]


def billing_header(version: str, entrypoint: str, first_prompt: str, *, subagent: bool = False) -> str:
    """The first system block Claude Code sends to a server of the user's own (no ``cch`` or
    first-party fields): ``x-anthropic-billing-header: cc_version=V.NNN; cc_entrypoint=E;``, with
    `` cc_is_subagent=true;`` for a subagent's requests. The request shape record leaves it out."""
    return (f"{BILLING} cc_version={version}.{fingerprint(first_prompt, version)}; cc_entrypoint={entrypoint};"
            + (" cc_is_subagent=true;" if subagent else ""))


def first_prompt(records: list[dict]) -> str:
    """The text Claude Code fingerprints: the first user record that is not meta (after a
    compaction, the summary), its string content or its first text block."""
    for r in records:
        if r.get("type") != "user" or r.get("isMeta"):
            continue
        content = (r.get("message") or {}).get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return next((b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                         and isinstance(b.get("text"), str)), "")
        return ""
    return ""


def tools_as_functions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from replayer.core.agents.capture import function_tool

    return [function_tool(t.get("name", ""), t.get("description"), t.get("input_schema")) for t in tools if "name" in t]
