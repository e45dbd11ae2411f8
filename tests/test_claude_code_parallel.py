"""Claude Code 2.x parallel tool calls: every result comes back, as Claude Code resumes it."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from replayer.core.session import build_request, load_session
from replayer.core.session.reader import iter_jsonl

from conftest import FIXTURES, REPO, SAMPLES

PARALLEL = FIXTURES / "claude-code" / "parallel-2x.jsonl"


def _inspect(path) -> dict:
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "inspect", str(path), "--json"], capture_output=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    return orjson.loads(r.stdout)


def test_fixture_has_the_2x_shape_that_loses_results_on_a_plain_walk():
    """The fixture really is the hard case: results hang off different parents, so walking
    parentUuid from the leaf meets only some of them."""
    recs = [r for r in iter_jsonl(PARALLEL) if r.get("uuid")]
    by = {r["uuid"]: r for r in recs}
    node, walked = recs[-1], set()
    while node is not None:
        walked.add(node["uuid"])
        node = by.get(node.get("parentUuid"))
    results = [r for r in recs if r["type"] == "user" and isinstance(r["message"]["content"], list)]
    assert len(results) == 7 and sum(r["uuid"] in walked for r in results) == 3
    parents = {r["parentUuid"] for r in results}
    assert len(parents) == 7  # each result hangs off its own call's record


def test_parallel_results_recovered_in_order_and_blocks_merged():
    s = load_session(PARALLEL)
    assert (s.n_tool_calls, s.n_tool_results) == (7, 7)
    assert (s.stats.recovered_tool_calls, s.stats.recovered_tool_results) == (1, 4)
    msgs = build_request(s).messages
    roles = [m["role"] for m in msgs]
    # the summary and the next prompt: consecutive user records, sent as one user message
    assert roles == ["user", "assistant", "tool", "tool", "tool", "assistant", "user", "assistant", "tool",
                     "tool", "assistant", "user", "assistant", "tool", "tool", "assistant"]
    first = msgs[1]  # thinking, text and three tool_use records of one message.id: one turn
    assert first["reasoning_content"] == "Read both at once." and first["content"] == "Reading both files."
    assert [c["id"] for c in first["tool_calls"]] == ["toolu_01", "toolu_02", "toolu_03"]
    # results in the order the file holds them (completion order), each right after its turn
    assert [m["tool_call_id"] for m in msgs[2:5]] == ["toolu_02", "toolu_01", "toolu_03"]
    assert [c["id"] for c in msgs[12]["tool_calls"]] == ["toolu_06", "toolu_07"]
    assert [m["tool_call_id"] for m in msgs[13:15]] == ["toolu_07", "toolu_06"]
    # the compaction cut the history; the rewound branch is not replayed
    assert msgs[0]["content"][0]["text"].startswith("This session is being continued")
    text = orjson.dumps(msgs).decode()
    assert "Let me guess" not in text and "What do src/a.py" not in text and "Hello! What" not in text
    for k, m in enumerate(msgs):  # every call is answered before the next non-tool message
        if m.get("tool_calls"):
            answered = []
            for n in msgs[k + 1:]:
                if n["role"] != "tool":
                    break
                answered.append(n["tool_call_id"])
            assert sorted(answered) == sorted(c["id"] for c in m["tool_calls"])


def test_inspect_states_what_was_recovered():
    info = _inspect(PARALLEL)
    assert info["tool_calls"] == info["tool_results"] == 7
    assert info["tool_calls_recovered"] == 1 and info["tool_results_recovered"] == 4
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "inspect", str(PARALLEL)], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert "tool calls     7, results 7  (1 calls and 4 results recovered from parallel branches)" in r.stdout


def _complete(path) -> bool:
    """Every main-thread tool_use in the file has a tool_result somewhere in the file."""
    uses, results = set(), set()
    for r in iter_jsonl(path):
        if r.get("isSidechain"):
            continue
        content = (r.get("message") or {}).get("content")
        for b in content if isinstance(content, list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                uses.add(b["id"])
            elif isinstance(b, dict) and b.get("type") == "tool_result":
                results.add(b["tool_use_id"])
    return uses <= results


@pytest.mark.parametrize("path", sorted((SAMPLES / "claude-code").glob("*.jsonl")) + [PARALLEL],
                         ids=lambda p: p.name[:40])
def test_every_result_the_file_holds_is_replayed(path):
    info = _inspect(path)
    if _complete(path):
        assert info["tool_results"] == info["tool_calls"]


def test_reused_message_id_of_another_response_is_not_merged():
    """A recorded 2.1.284 transcript (fake provider) reuses message.id "msg_1" for two
    responses; apiBlockIndex 0 twice says they are two turns."""
    s = load_session(SAMPLES / "claude-code" / "lazyagents_claude-code-2.1.284_609b44ad-7c18-4745-a70b-784281dce85e.jsonl")
    assert s.role_counts()["assistant"] == 2 and s.n_tool_calls == s.n_tool_results == 1
