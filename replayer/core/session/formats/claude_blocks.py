"""Claude Code's content blocks as the messages it sends: an API response's records (text,
thinking, tool calls) as one assistant message, a user record's tool results, text, images and
documents as tool and user messages. Shared by the transcript walk and the rebuild from its own
wire records (``claude_code``)."""

from __future__ import annotations

from typing import Any

from replayer.core.session.model import IMAGE_OMITTED, ImagePart, ImportStats, Message, TextPart, ToolCall, image_part
from replayer.core.session.reader import blob_size, json_args


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def blocks(r: dict) -> list[dict]:
    content = (r.get("message") or {}).get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def assistant_message(group: list[dict], ts: float | None) -> Message | None:
    """One API response's records (its blocks split over several) as one assistant message."""
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for r in group:
        content = (r.get("message") or {}).get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for b in content or []:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "text":
                texts.append(b.get("text", ""))
            elif bt == "thinking" and b.get("thinking"):
                thinking.append(b["thinking"])
            elif bt == "tool_use":
                calls.append(ToolCall(id=str(b.get("id", "")), name=b.get("name", ""),
                                      arguments=json_args(b.get("input", {}))))
    content = "\n\n".join(t for t in texts if t.strip()) or None
    if content is None and not calls and not thinking:
        return None
    return Message(role="assistant", content=content, reasoning="\n".join(thinking) or None,
                   tool_calls=calls, timestamp=ts)


def user_messages(r: dict, ts: float | None, images: str, stats: ImportStats | None = None) -> list[Message]:
    """A user record as the messages sent for it: each tool result a tool message (an image in it
    a placeholder), then its text, images and documents as one user message."""
    content = (r.get("message") or {}).get("content")
    origin = "compact_summary" if r.get("isCompactSummary") else ("meta" if r.get("isMeta") else None)
    if isinstance(content, str):
        return [Message(role="user", content=content, timestamp=ts, origin=origin)]
    out: list[Message] = []
    parts: list = []
    for b in content or []:
        if not isinstance(b, dict):
            continue
        bt = b.get("type")
        if bt == "tool_result":
            inner = b.get("content")
            text = text_of(inner)
            n_img = sum(1 for x in inner if isinstance(x, dict) and x.get("type") == "image") \
                if isinstance(inner, list) else 0
            if n_img and images != "keep":  # the image leaves its placeholder, not an empty result
                text = "\n".join(filter(None, [text] + [IMAGE_OMITTED] * n_img))
                if stats is not None:
                    stats.image_placeholders += n_img
            if b.get("is_error") and not text:
                text = "(tool error)"
            out.append(Message(role="tool", content=text, tool_call_id=str(b.get("tool_use_id", "")),
                               timestamp=ts))
            if isinstance(inner, list) and images == "keep":  # omitted, a result's images leave no text
                parts.extend(image_block(x, images) for x in inner if isinstance(x, dict) and x.get("type") == "image")
        elif bt == "text":
            parts.append(TextPart(text=b.get("text", "")))
        elif bt == "image":
            parts.append(image_block(b, images))
        elif bt == "document":
            parts.append(TextPart(text="(document omitted: model does not support documents)"))
    if parts:
        out.append(Message(role="user", content=parts, timestamp=ts, origin=origin))
    return out


def image_block(block: dict, images: str) -> TextPart | ImagePart:
    """An Anthropic image block (``source.media_type``, base64 ``source.data``) as the request carries it."""
    src = block.get("source") or {}
    return image_part(images, src.get("media_type", "image/png"), blob_size(src.get("data")))
