"""Cline's send-time cut of long tool results and replies (``cline_wire``), on made-up data;
tests/agents/test_cline_truncation.py holds it to what the real CLI sent."""

from __future__ import annotations

import json
import re

import orjson

from replayer.core.session.formats import cline, cline_wire

MARK = re.compile(r"\n\n\.\.\.\[truncated (\d+) chars\]\.\.\.\n\n")


def _parts(sent: str) -> tuple[str, int, str]:
    m = MARK.search(sent)
    assert m is not None, sent[:200]
    return sent[:m.start()], int(m.group(1)), sent[m.end():]


def test_a_text_within_the_limit_is_sent_whole():
    s = "a" * cline_wire.MAX_TOOL_RESULT_CHARS
    assert cline_wire.truncate_middle(s, cline_wire.MAX_TOOL_RESULT_CHARS) is s


def test_a_longer_text_keeps_equal_head_and_tail_around_the_count_of_what_went():
    s = "".join(f"line {k}\n" for k in range(3000))
    sent = cline_wire.truncate_middle(s, 8000)
    head, omitted, tail = _parts(sent)
    assert len(sent) <= 8000 and len(head) == len(tail) > 3900
    assert s.startswith(head) and s.endswith(tail) and len(head) + omitted + len(tail) == len(s)


def test_characters_past_the_bmp_count_two_as_in_javascript():
    s = "\U0001F600" * 4500  # 4,500 characters, 9,000 UTF-16 code units: over the limit
    head, omitted, tail = _parts(cline_wire.truncate_middle(s, 8000))
    units = (len(head) + len(tail)) * 2
    assert omitted + units == 9000 and set(head) == set(tail) == {"\U0001F600"}
    assert cline_wire.truncate_middle("\U0001F600" * 3999, 8000) == "\U0001F600" * 3999


def test_each_string_of_a_result_object_is_cut_before_the_list_becomes_json():
    long = "x" * 20000
    content = [{"query": "ls", "result": long, "success": True, "extra": [long]}]
    sent = cline_wire.tool_result_as_sent(content)
    assert sent[0]["query"] == "ls" and sent[0]["success"] is True
    assert len(sent[0]["result"]) <= 8000 and sent[0]["extra"][0] == sent[0]["result"]
    assert content[0]["result"] == long  # the stored one is left as it is
    image = {"type": "image", "data": long, "mediaType": "image/png"}
    assert cline_wire.tool_result_as_sent([image]) == [image]


def test_a_reply_is_cut_at_200k_or_at_12k_when_it_repeats_tool_call_markup():
    prose = "word " * 39000  # 195,000 characters: under the 200,000 a reply may have
    assert cline_wire.assistant_text_as_sent(prose) == prose
    assert "omitted" in cline_wire.assistant_text_as_sent(prose * 2)
    markup = "<tool_call>{}</tool_call>\n" * 1000
    sent = cline_wire.assistant_text_as_sent(markup)
    assert len(sent) <= 12000 and "due to repeated tool-call markup" in sent


def test_the_importer_rebuilds_a_long_stored_result_cut(tmp_path):
    long = "\n".join(f"file_{k:05d}.txt" for k in range(2000))
    doc = {"version": 1, "sessionId": "s", "agent": "lead", "system_prompt": "p", "origin": {"version": "3.0.65"},
           "messages": [
               {"role": "user", "content": [{"type": "text", "text": "list"}], "ts": 1},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "run_commands",
                                                  "input": {"commands": ["ls"]}}], "ts": 2},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                             "content": [{"query": "ls", "result": long, "success": True}]}], "ts": 3},
               {"role": "assistant", "content": [{"type": "text", "text": "Done."}], "ts": 4}]}
    f = tmp_path / "s.messages.json"
    f.write_bytes(orjson.dumps(doc))
    [tool] = [m for m in cline.load(f).messages if m.role == "tool"]
    [entry] = json.loads(tool.text())
    head, omitted, tail = _parts(entry["result"])
    assert long.startswith(head) and long.endswith(tail) and len(head) + omitted + len(tail) == len(long)


def test_the_vs_code_extensions_history_is_not_cut(tmp_path):
    """The extension's ``api_conversation_history.json`` (a bare list, also Roo Code's and Kilo
    Code's) is sent by other code than the CLI's message builder: its results stay whole."""
    long = "y" * 20000
    msgs = [{"role": "user", "content": [{"type": "text", "text": "list"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "execute_command",
                                               "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": long}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}]
    f = tmp_path / "api_conversation_history.json"
    f.write_bytes(orjson.dumps(msgs))
    [tool] = [m for m in cline.load(f).messages if m.role == "tool"]
    assert tool.text() == long
