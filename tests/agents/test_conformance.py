"""Each real agent CLI as a client: replayer's rebuild of the session file it wrote, turn by
turn, against the requests it sent (messages, system prompt and tools from a capture).

Scenario per agent: a prompt answered with one call of the agent's own shell tool, the tool
round, then a continued session (where the CLI can continue headless). What the agents send
stays in memory; a known send-time addition an importer cannot see is named in
``SEND_TIME`` and docs/agents.md, never silently skipped.
"""

from __future__ import annotations

import glob
import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import Agent
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import Logged, ModelServer
from replayer.core.session.turns import load_turns

from agents.conftest import agent_binary, run_subagent
from agents import wire

pytestmark = pytest.mark.agents


@dataclass
class Run:
    agent: Agent
    home: Path
    session_file: Path
    sent: list[Logged]  # the main thread's requests, in order
    others: list[Logged]  # side requests (titles, memory, quota)


_runs: dict[str, Run] = {}


def _run(agent: Agent, tmp_path_factory) -> Run:
    if agent.name in _runs:
        return _runs[agent.name]
    binary = agent_binary(agent)
    home = tmp_path_factory.mktemp(f"home-{agent.name}")
    project = home / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt")) as m:
        steps = ([agent.prepare(m.url)] if agent.prepare else []) + [agent.prompt("TOOL: list the files here")] + ([agent.resume("thanks")] if agent.resume else [])
        for args in steps:
            r = run(agent, binary, args, home=home, project=project, url=m.url)
            assert r.returncode == 0, f"{agent.label} exited {r.returncode}: {r.stderr[-500:]}"
        log = m.log
    files = sorted(glob.glob(str(home / agent.sessions)))
    assert len(files) == 1, f"{agent.label} wrote {files}"
    main, other = wire.main_thread(agent, log)
    _runs[agent.name] = Run(agent, home, Path(files[0]), main, other)
    return _runs[agent.name]


@pytest.fixture
def agent_run(agent, tmp_path_factory) -> Run:
    return _run(agent, tmp_path_factory)


def _rebuilt(r: Run, with_capture: bool) -> list[wire.Req]:
    """Replayer's turns of the agent's session file, as the comparison reads them."""
    if with_capture:
        cap = capture.from_request(r.agent.name, r.agent.version, r.agent.api, r.sent[0].body)
        capture.save(cap)
    turns = load_turns(r.session_file).turns[:-1]  # the last is the resume request, not yet sent
    return [wire.from_chat(t.body) for t in turns]


#: agents whose resumed process sends each earlier tool result twice, and writes it so (docs/agents.md)
RESULT_TWICE_AFTER_RESUME = {"gemini"}


def test_the_session_file_imports_with_the_tool_round(agent_run):
    s = load_turns(agent_run.session_file).session
    assert s.n_tool_calls == 1 and s.n_tool_results == 1 + (agent_run.agent.name in RESULT_TWICE_AFTER_RESUME)
    assert len(agent_run.sent) == 2 + bool(agent_run.agent.resume)  # prompt, tool result, continue


#: send-time additions an importer cannot see in the file (docs/agents.md): strict xfails, so a
#: fix shows as a failure to remove the entry
SEND_TIME = {
    "qwen": "Qwen Code prepends <system-reminder> parts to the first prompt at send time (the skills "
            "listing, an environment part with OS, folder and its file tree, the deferred tools, the date) "
            "and stores none of them: the skills, the tree and the deferred tools are state the file does "
            "not hold, only a capture has them",
}


def test_every_turn_has_the_messages_sent(agent_run, request):
    if agent_run.agent.name in SEND_TIME:
        request.applymarker(pytest.mark.xfail(reason=SEND_TIME[agent_run.agent.name], strict=True))
    rebuilt = _rebuilt(agent_run, with_capture=False)
    sent = [wire.FROM[agent_run.agent.api](q.body) for q in agent_run.sent]
    assert len(rebuilt) == len(sent)
    diffs = {k: d for k, (a, b) in enumerate(zip(rebuilt, sent))
             if (d := [x for x in wire.diff(a, b) if x.startswith("message")])}
    assert not diffs, f"{agent_run.agent.label}: {diffs}"


def test_every_turn_has_the_system_prompt_and_tools_sent_via_capture(agent_run):
    rebuilt = _rebuilt(agent_run, with_capture=True)
    sent = [wire.FROM[agent_run.agent.api](q.body) for q in agent_run.sent]
    diffs = {k: d for k, (a, b) in enumerate(zip(rebuilt, sent))
             if (d := [x for x in wire.diff(a, b) if not x.startswith("message")])}
    assert not diffs, f"{agent_run.agent.label}: {diffs}"


def test_a_capture_made_in_another_folder_rebuilds_the_prompt_sent(agent_run):
    """``replayer agents capture`` in its own temporary HOME and project (fit on one run), then
    the conformance run's session (another HOME and folder, checked on another run): the rebuilt
    system prompt and tools are the ones sent, the session's working directory in place of the
    capture's; for Qwen Code also every turn's messages, its send-time reminders included."""
    from replayer.core.agents.capture_run import capture_agent

    a = agent_run.agent
    # Qwen Code's reminders list the project's files: its capture runs in the session's project
    # (``--project``, as a user would), in its own HOME; the others in an empty folder of their own
    project = str(agent_run.home / "project") if a.reminders else None
    cap, _ = capture_agent(a.name, binary=str(agent_binary(a)), project=project)
    assert cap.version == a.version and cap.home and cap.home not in str(agent_run.session_file)
    turns = load_turns(agent_run.session_file).turns[:-1]
    rebuilt = wire.from_chat(turns[0].body)
    sent = wire.FROM[a.api](agent_run.sent[0].body)
    assert [d for d in wire.diff(rebuilt, sent) if not d.startswith("message")] == []
    if a.reminders:  # the send-time parts before each prompt come from the capture too, in every
        # turn: the startup parts before the first prompt, the date reminder before the prompt that
        # opened the request's run only (the continued run re-sends the first prompt without it)
        assert len(turns) == len(agent_run.sent)
        diffs = {k: d for k, (t, q) in enumerate(zip(turns, agent_run.sent))
                 if (d := wire.diff(wire.from_chat(t.body), wire.FROM[a.api](q.body)))}
        assert not diffs, diffs


#: agents whose importer rebuilds the compaction's summarization request (with a capture's prompt)
SUMMARIZED = {"claude"}


@pytest.mark.parametrize("name", [n for n, a in sorted(__import__(
    "replayer.core.agents.registry", fromlist=["AGENTS"]).AGENTS.items()) if a.compact])
def test_after_a_compaction_the_next_request_is_rebuilt_as_sent(name, tmp_path):
    """Tool round, a compaction (``claude -c -p /compact``; pi's RPC ``compact`` command), one
    more prompt: the rebuild of the request after the compaction (summary, system prompt and
    tools) is the one sent; and every request of the conversation is a turn, in order, rebuilt as
    sent: those before the compaction from the history the file keeps (``Session.earlier``), then
    those after it — none for the responses the compaction kept (pi's kept messages, Claude Code's
    preserved segment), which answered the longer history before it. The requests sent while the
    compaction ran are its summarization (Claude Code sends one with the conversation's own prompt
    and tools, the history without the preserved segment, then its prompt; pi's have no tools):
    for the agents in ``SUMMARIZED`` each is a turn of the ``compaction`` thread where it was sent,
    its prompt from ``replayer agents capture``; pi's are not rebuilt yet."""
    from replayer.core.agents.registry import AGENTS
    from replayer.core.agents.run import run_commands
    from replayer.core.session.turns import earlier_turns

    agent = AGENTS[name]
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(), project.mkdir()
    with ModelServer(str(project / "hello.txt")) as m:
        for args in (agent.prompt("TOOL: list the files here"), agent.compact, agent.resume("after the compaction")):
            before = len(m.log)
            r = (run_commands(agent, agent_binary(agent), args, agent.compact_commands, home=home, project=project,
                              url=m.url) if args is agent.compact and agent.compact_commands else
                 run(agent, agent_binary(agent), args, home=home, project=project, url=m.url))
            assert r.returncode == 0, r.stderr[-300:]
            if args is agent.compact:
                compacted_at, summarizing = before, {id(q) for q in m.log[before:]}
        log = m.log
    [f] = glob.glob(str(home / agent.sessions))
    main, _ = wire.main_thread(agent, log)
    if load_turns(f).session.system_prompt is None:  # pi stores none: a capture of the run's first request
        capture.save(capture.from_request(agent.name, agent.version, agent.api, main[0].body))
    if name in SUMMARIZED:  # the summarization prompt is the agent's code: `replayer agents capture` in
        # a HOME and folder of its own records it from a compaction of its own run
        from replayer.core.agents.capture_run import capture_agent

        cap, _ = capture_agent(agent.name, binary=str(agent_binary(agent)))
        first = next(q for q in log if id(q) in summarizing)
        assert cap.compaction and cap.compaction["prompt"] == capture.last_user_text(agent.api, first.body)
    st = load_turns(f)
    assert st.session.stats.compactions_total == 1
    rebuilt = wire.from_chat(st.turns[-2].body)
    assert "summary" in rebuilt.messages[0]["text"].lower() and "TOOL" not in rebuilt.messages[0]["text"]
    # the system prompt too: Claude Code's billing header fingerprints the summary now, not the first prompt
    assert wire.diff(rebuilt, wire.FROM[agent.api](log[-1].body)) == []
    # the conversation's own requests: its tools (Claude Code's billing header, part of the system
    # prompt, fingerprints the summary after the compaction, so main_thread's key misses them)
    tools = wire.FROM[agent.api](main[0].body).tools
    sent = [q for q in log if wire.FROM[agent.api](q.body).tools == tools and id(q) not in summarizing]
    own = [t for t in st.turns[:-1] if t.thread != "compaction"]
    assert len(own) == len(sent) and summarizing
    diffs = {k: d for k, (t, q) in enumerate(zip(own, sent))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)))}
    assert not diffs, diffs
    n_before = sum(1 for q in log[:compacted_at] if id(q) in {id(x) for x in sent})
    assert sum(1 for t in itertools.chain(*earlier_turns(st.session)) if not t.thread) == n_before == 2
    if name not in SUMMARIZED:
        assert not any(t.thread == "compaction" for t in st.turns)
        return
    # the summarization request(s) too, each where it was sent, on the compaction's thread: the
    # turns are every request of the run, in order, each the one sent (messages, system prompt, tools)
    every = [q for q in log if id(q) in summarizing or id(q) in {id(x) for x in sent}]
    assert [t.thread == "compaction" for t in st.turns[:-1]] == [id(q) in summarizing for q in every]
    diffs = {k: d for k, (t, q) in enumerate(zip(st.turns[:-1], every))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)))}
    assert not diffs, diffs


@pytest.mark.parametrize("name", [n for n, a in sorted(__import__(
    "replayer.core.agents.registry", fromlist=["AGENTS"]).AGENTS.items()) if a.subagents])
def test_a_subagent_thread_and_its_parent_are_rebuilt_as_sent(name, tmp_path):
    """A prompt the stub answers with the agent's own subagent tool: the subagent's requests go
    to the same server with their own prompt and tools; its file and the parent's each rebuild
    their own thread's requests."""
    from replayer.core.agents.registry import AGENTS

    agent = AGENTS[name]
    home = tmp_path / "home"
    home.mkdir()
    log = run_subagent(agent, home)
    [parent_file] = glob.glob(str(home / agent.sessions))
    [sub_file] = glob.glob(str(home / agent.subagents))
    parent, other = wire.main_thread(agent, log)
    sub = [q for q in other if q.body.get("tools")]
    assert len(parent) >= 2 and len(sub) >= 1
    for f, sent in ((parent_file, parent), (sub_file, sub)):
        turns = [t for t in load_turns(f).turns[:-1] if f == sub_file or not t.thread]  # the parent's own thread
        assert len(turns) == len(sent)
        for t, q in zip(turns, sent):
            # system prompt and tools too (a subagent's billing header says cc_is_subagent=true)
            assert wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)) == [], f



def _texts(m: dict) -> list[str]:
    c = m.get("content")
    return [p.get("text", "") for p in c] if isinstance(c, list) else [c or ""]


def test_qwen_several_prompts_in_one_process_are_rebuilt_as_sent_with_a_capture_made_so(tmp_path):
    """Qwen Code reading two prompts in one process (``--input-format stream-json``, as an SDK
    client runs it): it sends its date reminder before the process's first prompt only, keeps it
    there in every later request, and sends the second prompt bare; its prompt and tools are
    that mode's (not ``-p``'s). The file records no process boundary (the prompt ids' counter goes
    on across processes), so the rebuild follows the capture: one made the same way
    (``replayer agents capture qwen --one-process``, another HOME) takes the session as one run,
    and every turn — messages, system prompt, tools — is the request sent."""
    from replayer.core.agents.capture_run import capture_agent
    from replayer.core.agents.registry import AGENTS
    from replayer.core.agents.run import run_commands, user_message

    a = AGENTS["qwen"]
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(), project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt")) as m:
        r = run_commands(a, agent_binary(a), a.prompts_stdin, [user_message("TOOL: list the files here"),
                                                                user_message("thanks")],
                         home=home, project=project, url=m.url)
        assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / a.sessions))
    main, _ = wire.main_thread(a, log)
    assert len(main) == 3  # prompt, tool result, the second prompt
    users = [x for x in main[2].body["messages"] if x["role"] == "user"]
    assert _texts(users[-1]) == ["thanks"] and len(_texts(users[0])) > 1  # the reminders: first prompt only
    cap, _ = capture_agent(a.name, binary=str(agent_binary(a)), project=str(project), one_process=True)
    assert cap.one_process and cap.later_user_prefix == [] and cap.home not in f
    st = load_turns(f)
    assert len(st.turns) - 1 == len(main)
    diffs = {k: d for k, (t, q) in enumerate(zip(st.turns, main))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[a.api](q.body)))}
    assert not diffs, diffs
    assert any("taken as one run" in n for n in st.request.notes)
