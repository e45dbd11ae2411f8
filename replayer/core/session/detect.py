"""Which agent wrote this file: decided from content, not the file name (spec §6)."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.core.errors import FormatUnknown, ImportFailed
from replayer.core.session import aider, claude_code, codex, llamacpp_webui, openai_body, opencode, pi, request_log, sharegpt
from replayer.core.session.reader import check_readable_file, head_objects

FORMATS = ["pi", "claude-code", "codex", "opencode", "openai", "sharegpt", "llamacpp-webui", "aider", "chat-requests"]
_WHOLE_JSON_LIMIT = 64 * 1024 * 1024


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a cut multibyte char at the end is fine
    return False


def _jsonl_format(objs: list[dict]) -> str | None:
    for name, mod in (("pi", pi), ("codex", codex), ("claude-code", claude_code)):
        if mod.detect(objs):
            return name
    return None


def detect_format(path: Path) -> str:
    if path.is_dir():
        if opencode.storage_root(path) is not None:
            return "opencode"
        raise ImportFailed(f"{path} is a directory, not a session file",
                           hint="give a session file, or an OpenCode storage folder")
    check_readable_file(path)
    if opencode.is_sqlite(path):
        return "opencode"
    with open(path, "rb") as fh:
        head = fh.read(65536)
    if _is_binary(head):
        raise FormatUnknown(f"{path} is a binary file, not a session log")
    text = head.decode("utf-8", errors="replace")
    if aider.detect_text(text):
        return "aider"
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        objs = head_objects(path, 20)
        if request_log.detect(objs):
            return request_log.FORMAT
        if (len(objs) >= 2 or (objs and "\n" in stripped.rstrip())) and (found := _jsonl_format(objs)):
            return found
        doc = _whole_json(path)
        if isinstance(doc, dict) and str(doc.get("id", "")).startswith("ses_") and \
                opencode.storage_root(path.parent) is not None:
            return "opencode"
        if doc is not None:
            if llamacpp_webui.detect(doc):  # before the OpenAI body: its messages have roles too
                return "llamacpp-webui"
            if openai_body.detect(doc):
                return "openai"
            if sharegpt.detect(doc):
                return "sharegpt"
            if objs and pi.detect(objs):
                return "pi"
        elif objs and (found := _jsonl_format(objs)):
            return found
    raise FormatUnknown(
        f"cannot tell which agent wrote {path}",
        hint=f"supported: {', '.join(FORMATS)}; force one with --format",
    )


def _whole_json(path: Path):
    if path.stat().st_size > _WHOLE_JSON_LIMIT:
        return None
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return None
