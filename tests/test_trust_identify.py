"""The fields that tell a session's format (issue 24): one of them damaged no longer refuses the
whole session where the other records still tell it; the records that lack them are left out by
name; a file that cannot be told is refused in one line naming the field that would have."""

from __future__ import annotations

import orjson
import pytest

from conftest import FIXTURES
from replayer.core.errors import ReplayerError
from replayer.core.session import load_session, registry

PI = FIXTURES / "pi" / "small-v3.jsonl"
CODEX = FIXTURES / "codex" / "small-rollout.jsonl"


def _with_first_line(src, tmp_path, first: bytes | None):
    lines = src.read_bytes().split(b"\n")
    f = tmp_path / src.name
    f.write_bytes(b"\n".join(([first] if first is not None else []) + lines[1:]))
    return f


@pytest.mark.parametrize("first,note", [
    (b'{"type":"session","version":3,"id":[],"cwd":"/w"}', "its id is '[]'"),
    (b'{"type":"session","version":3,"cwd":"/w"}', "its id is 'None'"),
    (b'{"type":5,"version":3,"id":"x","cwd":"/w"}', "its type is '5'"),
    (b'{"type":"sess', "no session header"),  # the header line cut: an entry comes first
    (None, "no session header")])
def test_pi_with_a_damaged_or_lost_header_is_read_by_its_entries(tmp_path, first, note):
    f = _with_first_line(PI, tmp_path, first)
    assert registry.detect(f) == "pi"  # was: "cannot tell which agent wrote"
    s = load_session(f)
    assert [m.content for m in s.messages] == [m.content for m in load_session(PI).messages]
    assert any(note in n for n in s.notes), s.notes


@pytest.mark.parametrize("first", [b'{"timestamp":"2026-07-01T09:00:00Z","type":5,"payload":{}}',
                                   b'{"timestamp":"2026', None])
def test_codex_without_its_session_meta_is_read_by_its_wrapped_records(tmp_path, first):
    f = _with_first_line(CODEX, tmp_path, first)
    assert registry.detect(f) == "codex"
    s = load_session(f)
    assert len(s.messages) == len(load_session(CODEX).messages)
    assert any("not the session_meta" in n for n in s.notes), s.notes


def _doc(tmp_path, src, edit):
    doc = orjson.loads(src.read_bytes())
    edit(doc)
    f = tmp_path / src.name
    f.write_bytes(orjson.dumps(doc))
    return f


def test_an_openai_message_without_a_known_role_is_left_out_by_name(tmp_path):
    src = FIXTURES / "openai" / "agent-45-rounds.json"

    def edit(doc):
        doc["messages"][3]["role"] = 7

    f = _doc(tmp_path, src, edit)
    assert registry.detect(f) == "openai"
    s = load_session(f)
    assert len(s.messages) == len(load_session(src).messages) - 1
    assert s.incomplete and "messages[3] (role '7'" in s.incomplete


def test_a_sharegpt_turn_without_from_and_value_is_left_out_by_name(tmp_path):
    src = FIXTURES / "sharegpt" / "conversations.json"

    def edit(doc):
        del doc[0]["conversations"][3]["from"]

    f = _doc(tmp_path, src, edit)
    assert registry.detect(f) == "sharegpt"
    s = load_session(f)
    assert s.incomplete and "conversations[3] (a turn without from and value)" in s.incomplete
    assert "one file" not in [m.content for m in s.messages]


def test_a_webui_export_whose_conv_is_lost_is_told_by_its_messages(tmp_path):
    src = FIXTURES / "llamacpp-webui" / "conversation.json"

    def edit(doc):
        (doc[0] if isinstance(doc, list) else doc)["conv"] = 3

    f = _doc(tmp_path, src, edit)
    assert registry.detect(f) == "llamacpp-webui"  # was: an OpenAI body, every branch in one
    s = load_session(f)
    assert s.messages and any("its conv is int" in n for n in s.notes), s.notes


@pytest.mark.parametrize("data,field", [
    (b'{"model":"m","messages":[null]}', '"messages" is a list of 1 item'),
    (b'{"model":"m","messages":5}', '"messages" is int'),
    (b'{"model":"m","tools":[]}', 'without "messages"'),
    (b'[null]', "no object in it"),
    (b'{"type":"zzz"}\n{"a":1}\n', 'first record\'s "type" is \'zzz\''),
    (b'{"hello":"world"}\n{"x":1}\n', 'has no "type"')])
def test_a_file_that_cannot_be_told_is_refused_naming_the_field(tmp_path, data, field):
    f = tmp_path / "x.json"
    f.write_bytes(data)
    with pytest.raises(ReplayerError) as e:
        load_session(f)
    msg = str(e.value)
    assert "cannot tell which agent wrote" in msg and field in msg and "\n" not in msg, msg
