"""llama.cpp web-UI conversation exports (``llama-server``'s own chat page).

The web UI keeps conversations in the browser's IndexedDB and exports them as
``{"conv": {id, name, lastModified, currNode}, "messages": [...]}`` or a list of those.
Messages form a tree (``parent``/``children``: edits and regenerations are branches); the
active branch is the path from ``conv.currNode`` up to the root, as the UI sends it.

Each message becomes what the UI's ``convertDbMessageToApiChatMessageData`` sends:
attachments (``extra``) turn into content parts before the message's own text — text
files as ``"\\n\\n--- File: name ---\\n…"``, PDFs read as text as ``--- PDF File: …``,
images and audio as placeholders — and empty system messages are left out. Tool calls
are stored as a JSON string and tool results carry ``toolCallId``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ImportFailed
from replayer.core.session.branch import path_to_root
from replayer.core.session.model import ImagePart, ImportStats, Message, Session, TextPart, ToolCall, image_part
from replayer.core.session.reader import json_args, ms_to_s
from replayer.core.session.registry import Head, Importer, doc_confidence, mostly, read_doc

FORMAT = "llamacpp-webui"
AUDIO_OMITTED = "(audio omitted)"

# attachment kinds, current names and the older ones (imageFile, textFile, …)
_TEXT = {"text", "textfile"}
_CONTEXT = {"context"}
_IMAGE = {"image", "imagefile"}
_AUDIO = {"audio", "audiofile"}
_VIDEO = {"video", "videofile"}
_PDF = {"pdf", "pdffile"}
_MCP = {"mcp_prompt": "MCP Prompt", "mcpprompt": "MCP Prompt", "mcp_resource": "MCP Resource",
        "mcpresource": "MCP Resource"}


def _has_conv_id(m: Any) -> bool:
    return isinstance(m, dict) and "convId" in m


def _entries(doc: Any) -> list[dict]:
    """The conversations: a ``conv`` object beside a ``messages`` list, or (``conv`` lost or of
    another type) messages that carry their ``convId`` all the same."""
    items = doc if isinstance(doc, list) else [doc]
    return [d for d in items if isinstance(d, dict) and isinstance(d.get("messages"), list) and (
        isinstance(d.get("conv"), dict) or (bool(d["messages"]) and mostly(d["messages"][:20], _has_conv_id)))]


def _conv(entry: dict) -> dict:
    conv = entry.get("conv")
    return conv if isinstance(conv, dict) else {}


def detect(doc: Any) -> bool:
    ents = _entries(doc)
    return bool(ents) and mostly(ents[0]["messages"][:20], _has_conv_id)


def _attachment_text(label: str, name: str, content: str, extra: str | None = None) -> str:
    header = f"{name} ({extra})" if extra else name
    return f"\n\n--- {label}: {header} ---\n{content}"


def _user_content(m: dict, images: str) -> str | list:
    extras = [x for x in m.get("extra") or [] if isinstance(x, dict)]
    text = str(m.get("content") or "")
    if not extras:
        return text
    kind = {id(x): str(x.get("type", "")).lower() for x in extras}

    def image(x: dict) -> TextPart | ImagePart:
        return image_part(images, str(x.get("mimeType") or "image/png"))

    parts: list = []
    parts += [TextPart(text=_attachment_text("File", str(x.get("name", "")), str(x.get("content", ""))))
              for x in extras if kind[id(x)] in _TEXT | _CONTEXT]
    parts += [image(x) for x in extras if kind[id(x)] in _IMAGE]
    parts += [TextPart(text=AUDIO_OMITTED) for x in extras if kind[id(x)] in _AUDIO]
    if text:
        parts.append(TextPart(text=text))
    parts += [TextPart(text="(video omitted)") for x in extras if kind[id(x)] in _VIDEO]
    for x in extras:
        k = kind[id(x)]
        if k in _PDF:
            pages = x.get("images") if x.get("processedAsImages") else None
            if isinstance(pages, list) and pages:
                parts += [image({"mimeType": "image/png"}) for _ in pages]
            else:
                parts.append(TextPart(text=_attachment_text("PDF File", str(x.get("name", "")),
                                                            str(x.get("content", "")))))
        elif k in _MCP:
            parts.append(TextPart(text=_attachment_text(_MCP[k], str(x.get("name", "")), str(x.get("content", "")),
                                                        x.get("serverName"))))
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return parts


def _branch(messages: list[dict], leaf: Any) -> list[dict]:
    by_id = {m.get("id"): m for m in messages}
    if leaf not in by_id:  # no current node: the newest message
        leaf = max(messages, key=lambda m: m.get("timestamp") or 0).get("id")
    return path_to_root(by_id.get(leaf), by_id, id_key="id", parent_key="parent")


def load(path: Path, doc: Any, *, images: str = "omit") -> Session:
    ents = _entries(doc)
    if not ents:
        raise ImportFailed(f"{path} holds no llama.cpp web-UI conversations")
    entry = max(ents, key=lambda e: _conv(e).get("lastModified") or 0)
    warnings = ([f"{len(ents)} conversations in this export; replaying the newest "
                 f"({_conv(entry).get('name') or _conv(entry).get('id')})"] if len(ents) > 1 else [])
    if not isinstance(entry.get("conv"), dict):
        warnings.append(f"its conv is {type(entry.get('conv')).__name__}, not an object: "
                        "no title or current node, the newest message's branch replayed")
    msgs = [m for m in entry["messages"] if isinstance(m, dict)]
    branch = _branch(msgs, _conv(entry).get("currNode"))
    out: list[Message] = []
    system_prompt = None
    model = None
    for m in branch:
        role = m.get("role")
        ts = ms_to_s(m.get("timestamp"))
        if m.get("type") == "root" or role not in ("system", "user", "assistant", "tool"):
            continue
        if role == "system":
            text = str(m.get("content") or "")
            if text.strip():  # the UI drops empty system messages
                if system_prompt is None and not out:
                    system_prompt = text
                else:
                    out.append(Message(role="system", content=text, timestamp=ts))
            continue
        if role == "tool":
            out.append(Message(role="tool", content=str(m.get("content") or ""), tool_call_id=m.get("toolCallId"),
                               timestamp=ts))
            continue
        if role == "user":
            out.append(Message(role="user", content=_user_content(m, images), timestamp=ts))
            continue
        model = m.get("model") or model
        # the UI sends its stored string, empty beside tool calls (not null)
        msg = Message(role="assistant", content=str(m.get("content") or ""), timestamp=ts)
        reasoning = m.get("reasoningContent") or m.get("thinking")
        if isinstance(reasoning, str) and reasoning:
            msg.reasoning = reasoning
        calls = m.get("toolCalls")
        if isinstance(calls, str) and calls.strip():
            try:
                calls = orjson.loads(calls)
            except orjson.JSONDecodeError:
                calls = None
                warnings.append(f"message {m.get('id')}: its tool calls are not valid JSON; left out")
        for tc in calls if isinstance(calls, list) else []:
            if not isinstance(tc, dict):
                continue
            fn = tc.get("function") or {}
            msg.tool_calls.append(ToolCall(id=str(tc.get("id", "")), name=str(fn.get("name", "")),
                                           arguments=json_args(fn.get("arguments", "{}"))))
        out.append(msg)
    conv = _conv(entry)
    return Session(format=FORMAT, path=str(path), session_id=conv.get("id"), title=conv.get("name"), model=model,
                   updated=ms_to_s(conv.get("lastModified")), messages=out, system_prompt=system_prompt,
                   stats=ImportStats(entries_total=len(msgs), branch_length=len(branch)), warnings=warnings)


def detect_head(head: Head) -> float:
    return doc_confidence(head, detect, 0.8)  # before the OpenAI body: its messages have roles too


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(
    path, read_doc(path, detect, "a llama.cpp web-UI export"), images=o.images))
