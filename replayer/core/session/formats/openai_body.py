"""A stored OpenAI chat-completions request body: already the answer, so load and check.

Also accepts the llama.cpp web-UI export (a conversation tree followed from ``currNode``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.model import ImportStats, Message, Session, TextPart, ToolCall, image_part
from replayer.core.session.reader import blob_size, json_args
from replayer.core.session import salvage
from replayer.core.session.registry import Head, Importer, doc_confidence, is_one_of, mostly, read_doc

FORMAT = "openai"
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and is_one_of(m.get("role"), ROLES)


def detect(doc: Any) -> bool:
    """A chat body as sent: a ``messages`` list of role-keyed objects, every one (the check the
    traffic and request-log readers and the watch make of each body)."""
    return isinstance(doc, dict) and isinstance(doc.get("messages"), list) and all(map(_is_message, doc["messages"]))


def detect_file(doc: Any) -> bool:
    """A stored body, a few of whose messages may lack a known role (left out by name)."""
    return isinstance(doc, dict) and mostly(doc.get("messages"), _is_message)


def _parts(content: Any, images: str) -> str | list | None:
    if content is None or isinstance(content, str):
        return content
    out: list = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        if p.get("type") == "text":
            out.append(TextPart(text=p.get("text", "")))
        elif p.get("type") in ("image_url", "input_image"):
            url = (p.get("image_url") or {}).get("url", "") if isinstance(p.get("image_url"), dict) else p.get("image_url")
            mime = "image/png"
            if isinstance(url, str) and url.startswith("data:"):
                mime = url[5:].split(";", 1)[0] or mime
            out.append(image_part(images, mime, blob_size(url)))
    return out


def load(path: Path, doc: dict, *, images: str = "omit") -> Session:
    msgs = doc.get("messages") or []
    if not msgs:
        raise ImportFailed(f"{path} has an empty messages list")
    out: list[Message] = []
    system_prompt = None
    for i, m in enumerate(msgs):
        if not _is_message(m):
            role = m.get("role") if isinstance(m, dict) else type(m).__name__
            salvage.skip(m, f"role {str(role)[:40]!r} is none of {', '.join(sorted(ROLES))}")
            continue
        role = m.get("role")
        if role in ("system", "developer") and i == 0:
            c = m.get("content")
            system_prompt = c if isinstance(c, str) else "\n".join(
                p.get("text", "") for p in c or [] if isinstance(p, dict))
            continue
        if role == "function":
            role = "tool"
        msg = Message(role=role, content=_parts(m.get("content"), images), tool_call_id=m.get("tool_call_id"),
                      name=m.get("name"))
        for field in ("reasoning_content", "reasoning", "reasoning_text"):
            if isinstance(m.get(field), str) and m[field]:
                msg.reasoning, msg.reasoning_field = m[field], field
                break
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            msg.tool_calls.append(ToolCall(id=str(tc.get("id", "")), name=fn.get("name", ""),
                                           arguments=json_args(fn.get("arguments", "{}"))))
        out.append(msg)
    extra = {k: v for k, v in doc.items() if k in ("chat_template_kwargs", "reasoning_format")}
    return Session(format=FORMAT, path=str(path), model=doc.get("model"), messages=out,
                   system_prompt=system_prompt, tools=doc.get("tools"), extra_body=extra,
                   stats=ImportStats(entries_total=len(msgs), branch_length=len(msgs)))


def detect_head(head: Head) -> float:
    return doc_confidence(head, detect_file, 0.7)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(
    path, read_doc(path, detect_file, "an OpenAI chat-completions body"), images=o.images))
