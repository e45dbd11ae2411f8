"""Images in Claude Code and OpenCode sessions: one helper (``model.image_part``) decides what a
request carries, so ``--images keep`` and ``omit`` mean the same in every format."""

from __future__ import annotations

import orjson
import pytest

from replayer.core.session import load_session
from replayer.core.session.model import IMAGE_OMITTED, ImagePart, TextPart

JPEG = "QUJD" * 1000  # 4000 base64 characters: 3000 bytes, long enough to be stripped on read
PNG = "QUJDRA==" * 400


def _claude_session(tmp_path):
    base = {"sessionId": "s1", "timestamp": "2026-01-01T00:00:00Z", "version": "2.1.0"}
    records = [
        base | {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": [
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]}},
        base | {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "message": {
            "id": "m1", "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "shot.png"}}]}},
        base | {"type": "user", "uuid": "u2", "parentUuid": "a1", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "shot.png"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}},
    ]
    path = tmp_path / "claude.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


def _opencode_storage(tmp_path):
    root = tmp_path / "storage"
    files = {
        "session/proj/ses_img.json": {"id": "ses_img", "title": "images", "time": {"created": 1, "updated": 2}},
        "message/ses_img/msg_1.json": {"id": "msg_1", "sessionID": "ses_img", "role": "user",
                                       "time": {"created": 1700000001000}},
        "part/msg_1/prt_1.json": {"id": "prt_1", "type": "text", "text": "compare these"},
        "part/msg_1/prt_2.json": {"id": "prt_2", "type": "file", "mime": "image/png", "url": "data:image/png;base64,"},
        "part/msg_1/prt_3.json": {"id": "prt_3", "type": "file", "mime": "application/pdf", "filename": "a.pdf"},
        "part/msg_1/prt_4.json": {"id": "prt_4", "type": "file", "mime": "text/plain", "filename": "a.txt"},
    }
    for rel, obj in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(orjson.dumps(obj))
    return root


@pytest.mark.parametrize("images", ["omit", "keep"])
def test_claude_code_images_documents_and_tool_result_images(tmp_path, images):
    s = load_session(_claude_session(tmp_path), images=images)
    user, assistant, tool, *rest = s.messages
    doc = TextPart(text="(document omitted: model does not support documents)")
    if images == "keep":
        assert user.content == [TextPart(text="what is in this picture?"),
                                ImagePart(mime="image/jpeg", byte_size=3000), doc]
        # a tool result's images follow it as a user message, as Claude Code sends them
        assert [m.content for m in rest] == [[ImagePart(mime="image/png", byte_size=len(PNG) * 3 // 4)]]
    else:
        assert user.content == [TextPart(text="what is in this picture?"), TextPart(text=IMAGE_OMITTED), doc]
        assert rest == []
    # omitted, a result's image leaves its placeholder in the result (issue #22: it left nothing)
    result = "shot.png" if images == "keep" else f"shot.png\n{IMAGE_OMITTED}"
    assert assistant.tool_calls[0].id == "t1" and (tool.role, tool.content) == ("tool", result)


@pytest.mark.parametrize("images", ["omit", "keep"])
def test_opencode_file_parts(tmp_path, images):
    s = load_session(_opencode_storage(tmp_path), images=images)
    [user] = s.messages
    image = ImagePart(mime="image/png") if images == "keep" else TextPart(text=IMAGE_OMITTED)
    # a PDF is never kept (text-only models); a text file is inlined by OpenCode elsewhere, not here
    assert user.content == [TextPart(text="compare these"), image, TextPart(text=IMAGE_OMITTED)]
