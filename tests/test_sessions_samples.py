"""Every real sample in ../shared/samples imports, with counts read from the files themselves."""

from __future__ import annotations

import os
import sqlite3

import orjson
import pytest

from replayer.core.session import build_request, load_session

from conftest import SAMPLES, need_shared

# (relative path, format, role counts, tool calls, compactions applied, agent version)
EXPECTED = [
    ("pi/badlogic-pi-mono_v1_large-session.jsonl", "pi",
     {"user": 88, "assistant": 431, "tool": 373}, 373, 0, None),
    ("pi/badlogic-pi-mono_v1_before-compaction.jsonl", "pi",
     {"user": 35, "assistant": 212, "tool": 193}, 193, 1, None),
    ("pi/lazyagents_pi-0.87.1_2026-09-30T11-37-32-309Z_01a0f21b-0595-72a7-84dc-df0fc0d0de3f.jsonl", "pi",
     {"user": 2, "assistant": 4, "tool": 2}, 2, 0, None),
    ("synthetic/SYNTHETIC_pi-v3_branch-compaction-thinking-partial-tail.jsonl", "pi",
     {"user": 5, "assistant": 2, "tool": 1}, 1, 1, None),
    ("claude-code/claude-code-viewer_1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", "claude-code",
     {"user": 1, "assistant": 7, "tool": 12}, 12, 0, "1.0.98"),  # consecutive user records: one message
    ("claude-code/claude-code-viewer_5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl", "claude-code",
     {"user": 1, "assistant": 10, "tool": 13}, 13, 0, "1.0.108"),
    ("claude-code/claude-code-viewer_fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl", "claude-code",
     {"user": 2, "assistant": 9, "tool": 11}, 11, 0, "1.0.98"),
    ("claude-code/claude-code-viewer_agent-test-hash-123.jsonl", "claude-code",
     {"user": 1, "assistant": 1}, 0, 0, "2.0.28"),
    ("claude-code/daaain-claude-code-log_FIXTURE_dag_compact_after_rewind.jsonl", "claude-code",
     {"user": 1, "assistant": 1}, 0, 1, "2.1.0"),  # the summary and the next prompt: one message
    ("claude-code/lazyagents_claude-code-2.1.284_609b44ad-7c18-4745-a70b-784281dce85e.jsonl", "claude-code",
     {"user": 1, "assistant": 2, "tool": 1}, 1, 0, "2.1.284"),
    ("codex/lazyagents_codex-0.158.0_rollout-2026-09-30T08-39-00-01a0f21c-5c40-7f72-9aa9-ef0b43570680.jsonl",
     "codex", {"developer": 1, "user": 2, "assistant": 2, "tool": 1}, 1, 0, "0.158.0"),  # developer sent as such
    ("codex/simonw-claude-code-transcripts_sample_codex_session_871966d_cli0.77.jsonl", "codex",
     {"user": 3}, 0, 0, "0.77.0"),
    ("synthetic/SYNTHETIC_openai-chat-request_llama-server.json", "openai",
     {"user": 2, "assistant": 2, "tool": 1}, 1, 0, None),
    ("synthetic/SYNTHETIC_sharegpt-with-tools.json", "sharegpt",
     {"user": 1, "assistant": 2, "tool": 1}, 1, 0, None),
]


def _count_lines(path, pred):
    n = 0
    for line in path.read_bytes().split(b"\n"):
        if line.strip():
            try:
                o = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            n += pred(o)
    return n


@pytest.mark.parametrize("rel,fmt,roles,calls,comp,version", EXPECTED, ids=[e[0].split("/")[-1][:40] for e in EXPECTED])
def test_sample_imports(rel, fmt, roles, calls, comp, version):
    path = need_shared(SAMPLES / rel)
    s = load_session(path)
    assert s.format == fmt
    assert s.role_counts() == roles
    assert s.n_tool_calls == calls
    assert s.stats.compactions_applied == comp
    assert s.agent_version == version
    req = build_request(s)
    assert req.messages, "the request has messages"
    # every tool result answers a call made earlier in the request
    call_ids = set()
    for m in req.messages:
        for tc in m.get("tool_calls") or []:
            call_ids.add(tc["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in call_ids


def test_pi_v1_counts_follow_the_file():
    """Replayed turns = stored turns minus aborted/errored ones, counted from the raw lines."""
    path = need_shared(SAMPLES / "pi/badlogic-pi-mono_v1_large-session.jsonl")
    assistant = _count_lines(path, lambda o: o.get("type") == "message" and o["message"]["role"] == "assistant")
    dropped = _count_lines(path, lambda o: o.get("type") == "message" and o["message"]["role"] == "assistant"
                           and o["message"].get("stopReason") in ("aborted", "error"))
    s = load_session(path)
    assert (assistant, dropped) == (453, 22)
    assert s.stats.dropped_turns == dropped
    # assistant turns with no text and no calls are skipped by pi's adapter too
    assert s.role_counts()["assistant"] <= assistant - dropped


def test_pi_latest_compaction_wins():
    path = need_shared(SAMPLES / "pi/badlogic-pi-mono_v1_before-compaction.jsonl")
    s = load_session(path)
    assert s.stats.compactions_total == 2 and s.stats.compactions_applied == 1
    first = s.messages[0]
    assert first.role == "user" and first.text().startswith(
        "The conversation history before this point was compacted into the following summary:")
    # the kept range starts at firstKeptEntryIndex 551 of the second compaction, so no message
    # from before line 551 survives: the bash execution at line 639 does, rendered pi's way
    bash = [m for m in s.messages if m.origin == "bash"]
    assert len(bash) == 3 and bash[0].text().startswith("Ran `ls`\n```\nAGENTS.md")


def test_pi_turns_after_a_compaction_are_the_requests_sent_after_it():
    """The responses the compaction kept answered the history before it (pi sent them the whole
    conversation, not the summary): the turns rebuilt from the history after the latest
    compaction are those of the responses after it only — each turn's response is later than
    the compaction in the file, and every response after it is a turn."""
    from replayer.core.session.reader import iso_to_s
    from replayer.core.session.turns import load_turns, response_starts

    path = need_shared(SAMPLES / "pi/badlogic-pi-mono_v1_before-compaction.jsonl")
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
    at = iso_to_s([e for e in lines if e.get("type") == "compaction"][-1]["timestamp"])
    st = load_turns(path)
    msgs = st.request.messages
    off = len(msgs) - len(st.session.messages)  # the system prompt, when the request has one
    starts = [i for i in response_starts(msgs) if i > 0]
    kept = [i for i in starts if i < st.request.compacted_prefix]
    assert kept and all(st.session.messages[i - off].timestamp < at for i in kept)  # answered before it
    after = [t for t in st.turns[:-1] if t.messages == msgs[:t.n_messages]]  # those of the latest history
    assert after and all(st.session.messages[t.n_messages - off].timestamp > at for t in after)
    assert [t.n_messages for t in after] == [i for i in starts if st.session.messages[i - off].timestamp > at]
    assert any(f"{len(kept)} response(s) the compaction kept" in n for n in st.notes)


def test_pi_turns_before_the_compactions_are_the_requests_sent_before_them():
    """pi's file keeps every entry: the requests sent before each of its two compactions are
    turns too, in order, before those after the latest one. So every response the file holds
    (the aborted and errored ones aside: pi drops them on resume) answers exactly one turn, in
    file order: 170 before the first compaction, 121 between them, 174 after (of the 212 after
    it, 38 are the kept ones, counted before it). It was 175 turns (174 and the resume)."""
    from replayer.core.session.reader import ms_to_s
    from replayer.core.session.turns import load_turns

    path = need_shared(SAMPLES / "pi/badlogic-pi-mono_v1_before-compaction.jsonl")
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
    answered = [ms_to_s(e["message"]["timestamp"]) for e in lines if e.get("type") == "message"
                and e["message"].get("role") == "assistant" and e["message"].get("stopReason") not in ("aborted", "error")]
    st = load_turns(path)
    histories = [*st.session.earlier, st.session]
    # each turn's response: the message just past the turn in the history its body was built from
    bodies = {}
    for h in histories:
        s = st.session.model_copy(update={"messages": h.messages, "earlier": []})
        bodies[len(bodies)] = (h, build_request(s).messages)
    got = []
    for t in st.turns[:-1]:
        h, msgs = next(v for v in bodies.values() if v[1][:t.n_messages] == t.messages)
        got.append(h.messages[t.n_messages - (len(msgs) - len(h.messages))].timestamp)
    assert len(st.session.earlier) == 2 and len(st.turns) - 1 == len(answered) == 465
    assert got == answered
    assert any("291 turn(s) are the requests sent before them" in n for n in st.notes)


def test_synthetic_pi_matches_expected_messages():
    src = need_shared(SAMPLES / "synthetic/SYNTHETIC_pi-v3_branch-compaction-thinking-partial-tail.jsonl")
    exp = orjson.loads((SAMPLES / "synthetic/SYNTHETIC_pi-v3_branch-compaction-thinking-partial-tail.EXPECTED-openai-messages.json").read_bytes())
    s = load_session(src)
    req = build_request(s, system_prompt=exp["messages"][0]["content"])
    assert req.messages == exp["messages"]
    assert s.stats.bad_lines == exp["_meta"]["bad_lines"] and s.stats.partial_tail is exp["_meta"]["partial_tail"]
    assert s.thinking_level == exp["_meta"]["thinkingLevel"]
    assert [s.provider, s.model] == exp["_meta"]["model"]
    assert any("did not parse" in w for w in s.warnings)


def test_pi_087_system_prompt_and_tools_are_persisted():
    s = load_session(need_shared(SAMPLES / "pi/lazyagents_pi-0.87.1_2026-09-30T11-37-32-309Z_01a0f21b-0595-72a7-84dc-df0fc0d0de3f.jsonl"))
    assert s.system_prompt and s.system_prompt.startswith("<cwd>")  # sections in key order
    assert [t["function"]["name"] for t in s.tools] == ["read", "bash", "edit", "write"]
    assert build_request(s).missing == []
    assert s.title == "Fixture session"


def test_pi_085_and_claude_code_report_missing_prompt():
    s = load_session(need_shared(SAMPLES / "pi/badlogic-pi-mono_v1_large-session.jsonl"))
    req = build_request(s)
    assert req.missing == ["system_prompt", "tools"]
    assert "--system-prompt" in req.notes[-1]


def test_claude_code_sidechains_excluded_and_blocks_merged():
    path = need_shared(SAMPLES / "claude-code/claude-code-viewer_fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl")
    sidechain = _count_lines(path, lambda o: bool(o.get("isSidechain")))
    s = load_session(path)
    assert s.stats.sidechain_records == sidechain == 405
    # no two consecutive assistant messages came from one API message
    assert s.model and s.model.startswith("claude")


def test_claude_code_rewind_takes_latest_branch():
    s = load_session(need_shared(SAMPLES / "claude-code/daaain-claude-code-log_FIXTURE_dag_compact_after_rewind.jsonl"))
    texts = [m.text() for m in s.messages]
    assert "First attempt" not in texts
    assert s.stats.compactions_applied == 1


@pytest.fixture
def opencode_db(tmp_path):
    sql = need_shared(SAMPLES / "opencode/lazyagents_opencode-1.18.33_opencode.sql")
    db = tmp_path / "opencode.db"
    con = sqlite3.connect(db)
    con.executescript(sql.read_text(encoding="utf-8"))
    con.close()
    return db


def test_opencode_sqlite_sample(opencode_db):
    before = (opencode_db.read_bytes(), os.stat(opencode_db).st_mtime_ns)
    s = load_session(opencode_db)
    assert s.format == "opencode" and s.agent_version == "1.18.33"
    assert s.role_counts() == {"user": 1, "assistant": 2, "tool": 1}
    assert s.messages[1].tool_calls[0].name == "bash"
    assert s.messages[2].content == "fixture\n"
    assert (opencode_db.read_bytes(), os.stat(opencode_db).st_mtime_ns) == before


@pytest.mark.parametrize("sub", ["", "storage", "storage/session/proj1/ses_test1.json"])
def test_opencode_json_storage_sample(sub):
    root = need_shared(SAMPLES / "opencode/cass-FIXTURE-json-storage-layout")
    s = load_session(root / sub if sub else root)
    assert s.format == "opencode" and s.session_id == "ses_test1"
    assert [m.role for m in s.messages] == ["user", "assistant"]
    assert s.messages[0].content == "Hello, can you help me with Rust?"
