"""Claude Code 1.0.x wrote each Task subagent's conversation into the main file, as records with
``isSidechain: true``. Each sidechain imports as its own thread, its sent requests placed between
the main turns by their times; the main thread is what it was without them.

Checked on the real 1.0.98 and 1.0.108 transcripts (tests/data/samples) against facts read
from the raw records here — which Task call started each subagent, where its result came back —
and on a fixture written from the format (two parallel subagents, then a third)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SAMPLES
from replayer.cli import main
from replayer.core.session import load_session
from replayer.core.session.request import request_from_files
from replayer.core.session.turns import MAIN, load_turns, thread_of, turns_of_request

REAL = [SAMPLES / "claude-code" / "claude-code-viewer_fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
        SAMPLES / "claude-code" / "claude-code-viewer_5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"]


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _raw_sidechains(path: Path) -> list[tuple[str, int]]:
    """From the raw records: each sidechain's first prompt and how many API responses it holds
    (distinct ``message.id``), roots in file order."""
    recs = _records(path)
    side = {r["uuid"]: r for r in recs if r.get("isSidechain")}
    root_of = {}
    for u, r in side.items():  # parents come first in the file
        p = r.get("parentUuid")
        root_of[u] = root_of[p] if p in side else u
    out = []
    for root in dict.fromkeys(root_of.values()):
        ids = {side[u]["message"]["id"] for u in side if root_of[u] == root and side[u]["type"] == "assistant"}
        out.append((side[root]["message"]["content"], len(ids)))
    return out


def _main_only(path: Path, folder: Path) -> Path:
    """The same file without its sidechain records."""
    folder.mkdir(exist_ok=True)
    out = folder / path.name
    out.write_text("".join(json.dumps(r) + "\n" for r in _records(path) if not r.get("isSidechain")))
    return out


@pytest.mark.parametrize("path", REAL, ids=["1.0.98", "1.0.108"])
def test_each_sidechain_of_a_real_transcript_is_a_thread_with_its_own_requests(path):
    raw = _raw_sidechains(path)
    st = load_turns(path)
    subs = [t for t in st.turns if thread_of(t) != MAIN]
    names = list(dict.fromkeys(thread_of(t) for t in subs))
    assert names == [f"sidechain-{k}" for k in range(1, len(raw) + 1)]
    for name, (prompt, n_responses) in zip(names, raw):
        mine = [t for t in subs if thread_of(t) == name]
        # every response but the last (the answer handed back to the main thread) was a request's reply
        assert len(mine) == n_responses
        assert [m for m in mine[0].messages if m["role"] == "user"][0]["content"] == prompt
        assert all(t.messages[:len(mine[0].messages)] == mine[0].messages for t in mine)  # one conversation
    assert any("sidechain records" in n for n in st.notes)


@pytest.mark.parametrize("path", REAL, ids=["1.0.98", "1.0.108"])
def test_the_subagent_requests_sit_between_the_task_call_and_its_result(path):
    """Each sidechain's requests come after the main request that made its Task call and
    before the first main request that carries that call's result."""
    calls = {}
    for r in _records(path):
        if r.get("type") == "assistant" and not r.get("isSidechain"):
            for b in r["message"]["content"]:
                if isinstance(b, dict) and b.get("name") == "Task":
                    calls[b["id"]] = b["input"].get("prompt", "")  # 1.0.108 has a call without one
    turns = load_turns(path).turns
    for name, (prompt, _) in zip([f"sidechain-{k}" for k in range(1, 99)], _raw_sidechains(path)):
        call = next(i for i, p in calls.items() if p.strip()[:60] == prompt.strip()[:60])
        at = [k for k, t in enumerate(turns) if thread_of(t) == name]

        def has(t, what):
            return any(what(m) for m in t.messages)

        first_with_call = next(k for k, t in enumerate(turns) if thread_of(t) == MAIN and has(
            t, lambda m: any(tc["id"] == call for tc in m.get("tool_calls") or [])))
        made_call = max(k for k in range(first_with_call) if thread_of(turns[k]) == MAIN)
        got_result = next(k for k, t in enumerate(turns) if thread_of(t) == MAIN and has(
            t, lambda m: m.get("tool_call_id") == call))
        assert made_call < min(at) and max(at) < got_result, (name, made_call, at, got_result)


@pytest.mark.parametrize("path", REAL, ids=["1.0.98", "1.0.108"])
def test_the_main_thread_is_unchanged_by_its_sidechains(path, tmp_path):
    st = load_turns(path)
    alone = load_turns(_main_only(path, tmp_path / "alone"))
    assert [t.thread for t in alone.turns] == [None] * len(alone.turns)
    assert [t.body for t in st.turns if thread_of(t) == MAIN] == [t.body for t in alone.turns]
    s = load_session(path)
    assert turns_of_request(request_from_files(s))[-1].body == st.turns[-1].body  # the resume request


def _fixture(path: Path) -> Path:
    """A 1.0.x-shaped transcript written from the format: the main thread calls Task twice in
    one response (two subagents run at once), gets both results, then calls Task once more.
    Each response is written one content block per record; sidechain records follow the
    main thread's as Claude Code appended them, each thread rooted at its prompt."""
    recs: list[dict] = []
    now = [0]

    def rec(kind, content, parent, *, side=False, msg_id=None, at=None):
        uuid = f"u{len(recs):03d}"
        now[0] = t = now[0] + 2 if at is None else at
        r = {"parentUuid": parent, "isSidechain": side, "userType": "external", "cwd": "/proj",
             "sessionId": "s-1", "version": "1.0.98", "type": kind, "uuid": uuid,
             "timestamp": f"2025-09-03T00:{t // 60:02d}:{t % 60:02d}.000Z"}
        if kind == "assistant":
            r["message"] = {"id": msg_id, "type": "message", "role": "assistant", "model": "claude-x",
                            "content": [content], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 2}}
        else:
            r["message"] = {"role": "user", "content": content}
        recs.append(r)
        return uuid

    def task(id_, prompt):
        return {"type": "tool_use", "id": id_, "name": "Task", "input": {"description": prompt[:10], "prompt": prompt}}

    def result(id_, text):
        return [{"type": "tool_result", "tool_use_id": id_, "content": [{"type": "text", "text": text}]}]

    def subagent(prompt, n_tools, tag, t0):
        """One subagent's records, written whole, one every 2 s from ``t0``."""
        times = iter(range(t0, t0 + 100, 2))
        p = rec("user", prompt, None, side=True, at=next(times))
        for k in range(n_tools):
            p = rec("assistant", {"type": "tool_use", "id": f"{tag}-t{k}", "name": "Bash",
                                  "input": {"command": f"ls {k}"}}, p, side=True, msg_id=f"msg_{tag}_{k}",
                    at=next(times))
            p = rec("user", result(f"{tag}-t{k}", f"out {k}"), p, side=True, at=next(times))
        rec("assistant", {"type": "text", "text": f"{tag} done"}, p, side=True, msg_id=f"msg_{tag}_end",
            at=next(times))

    p = rec("user", "build the thing with helpers", None)
    p = rec("assistant", {"type": "text", "text": "Starting two helpers."}, p, msg_id="msg_m1")
    p = rec("assistant", task("task-a", "look at the parser"), p, msg_id="msg_m1")
    p = rec("assistant", task("task-b", "look at the lexer"), p, msg_id="msg_m1")
    # the two subagents run at once (their times interleave), each thread written whole
    t0 = now[0] + 2
    subagent("look at the parser", 2, "a", t0)
    subagent("look at the lexer", 1, "b", t0 + 1)
    now[0] = t0 + 20
    p = rec("user", result("task-a", "parser ok"), p)
    p = rec("user", result("task-b", "lexer ok"), p)
    p = rec("assistant", task("task-c", "write the tests"), p, msg_id="msg_m2")
    subagent("write the tests", 1, "c", now[0] + 2)
    now[0] += 20
    p = rec("user", result("task-c", "tests written"), p)
    rec("assistant", {"type": "text", "text": "All done."}, p, msg_id="msg_m3")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_a_fixture_from_the_format_imports_its_three_subagents_in_order(tmp_path):
    f = _fixture(tmp_path / "s-1.jsonl")
    st = load_turns(f)
    got = [(thread_of(t), len(t.messages)) for t in st.turns]
    assert got == [
        (MAIN, 1),  # the first request: the user's prompt; its reply calls Task twice
        # the parser's two tool rounds and the lexer's one, as they were sent at once
        ("sidechain-1", 1), ("sidechain-2", 1), ("sidechain-1", 3), ("sidechain-2", 3), ("sidechain-1", 5),
        (MAIN, 4),  # the results of both Task calls; the reply calls Task again
        ("sidechain-3", 1), ("sidechain-3", 3),
        (MAIN, 6),  # the last result; the reply is the answer
        (MAIN, 7),  # the resume request
    ]
    assert st.turns[1].messages == [{"role": "user", "content": "look at the parser"}]
    assert st.notes[0].startswith("7 subagent request(s) on 3 thread(s) from the sidechain records in the file")
    alone = load_turns(_main_only(f, tmp_path / "alone"))
    assert [t.body for t in st.turns if thread_of(t) == MAIN] == [t.body for t in alone.turns]


def test_inspect_counts_the_sidechain_threads(tmp_path, capsys):
    f = _fixture(tmp_path / "s-1.jsonl")
    assert main(["inspect", str(f), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["threads"] == {MAIN: 4, "sidechain-1": 3, "sidechain-2": 2, "sidechain-3": 2}
    assert info["turns"] == 11 and info["messages"] == 7


def test_a_subagents_own_file_is_its_main_thread(tmp_path):
    """A file holding only sidechain records (2.0.x's agent file) has no sidechain threads: that
    thread is the file's own."""
    f = SAMPLES / "claude-code" / "claude-code-viewer_agent-test-hash-123.jsonl"
    st = load_turns(f)
    assert {thread_of(t) for t in st.turns} == {MAIN}


def test_a_sidechain_loop_or_a_missing_root_does_not_hang_or_fail(tmp_path):
    f = _fixture(tmp_path / "s-1.jsonl")
    recs = _records(f)
    side = [r for r in recs if r["isSidechain"]]
    side[0]["parentUuid"] = side[1]["uuid"]  # the first thread's root points into its own chain: a loop
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = load_turns(f)
    assert [thread_of(t) for t in st.turns].count(MAIN) == 4


@pytest.mark.parametrize("path", REAL, ids=["1.0.98", "1.0.108"])
def test_the_sidechains_parse_the_file_once_between_them(path, monkeypatch):
    """The main import parses the file; its times, its sidechains' roots and each sidechain's
    conversation and times share one more parse (``reader.JsonlFile``), not one each."""
    from replayer.core.session import reader

    parses: list[Path] = []
    objects = reader._objects

    def counting(p, stats):
        parses.append(Path(p))
        return objects(p, stats)

    monkeypatch.setattr(reader, "_objects", counting)
    st = load_turns(path)
    n_side = len({t.thread for t in st.turns if t.thread})
    assert n_side >= 2 and parses == [path, path]
    monkeypatch.undo()
    from replayer.core.session.formats import claude_code
    from replayer.core.session.reader import read_records

    # each sidechain as its own read of the file gives: the same messages
    roots = list(claude_code.sidechains(read_records(path, "Claude Code")[0]))
    shared = [t for t in st.turns if t.thread]
    for k, root in enumerate(roots, 1):
        alone = turns_of_request(request_from_files(load_session(path, "claude-code", thread=root)))[:-1]
        assert [t.body for t in shared if t.thread == f"sidechain-{k}"] == [t.body for t in alone]
