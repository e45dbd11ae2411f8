"""``replayer agents capture``: the user's own installed agent, run once against the stub model.

The agent runs in a temporary HOME (none of the user's configuration, keys or sessions are
read or written) with a prompt the stub answers in text, so it calls no tool; its first
request's system prompt and tools are kept in the capture cache, keyed by its version.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS, Agent
from replayer.core.agents.run import run, run_commands, user_message
from replayer.core.agents.stub_model import ModelServer
from replayer.core.errors import ReplayerError

PROMPT = "Reply with one word."
LATER = "And one more."
#: a prompt the stub answers with the agent's subagent tool (``stub_model.AGENT_TOOLS``)
SUBAGENT = "SUBAGENT: have a helper look around"


def find_binary(agent: Agent, binary: str | None) -> Path:
    found = binary or shutil.which(agent.binary)
    if not found or not Path(found).exists():
        raise ReplayerError(f"{agent.label} is not installed ({agent.binary} not on PATH); "
                            f"install {agent.package} or pass --binary")
    return Path(found)


def agent_version(agent: Agent, binary: Path) -> str:
    """The version the agent prints (the capture's key)."""
    with tempfile.TemporaryDirectory(prefix="replayer-agent-") as home:
        try:
            r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                               env={"HOME": home, "PATH": str(binary.parent) + ":/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReplayerError(f"{binary} --version failed: {exc}") from None
    m = re.search(r"\d+\.\d+\.\d+[\w.+-]*", r.stdout + r.stderr)
    if m is None:
        raise ReplayerError(f"cannot tell the version of {binary} from its --version output")
    return m.group(0)


def capture_agent(name: str, *, binary: str | None = None, project: str | None = None,
                  one_process: bool = False) -> tuple[capture.Capture, Path]:
    """Capture the agent's prompt and tools (and, for an agent with send-time reminders, the
    parts before its first and a later prompt: from two runs, ``-p`` then ``-c -p``, or with
    ``one_process`` from one process reading both prompts, Qwen Code's stream-json input mode;
    for an agent whose subagents send a prompt of their own, each one's from one run more; for an
    agent that compacts headless, its summarization request's prompt from a compaction of that run)."""
    if name not in AGENTS:
        raise ReplayerError(f"unknown agent {name!r}; choose one of {', '.join(AGENTS)}")
    agent = AGENTS[name]
    if one_process and not agent.prompts_stdin:
        raise ReplayerError(f"{agent.label} cannot be run headless as one process of several prompts")
    exe = find_binary(agent, binary)
    version = agent_version(agent, exe)
    with tempfile.TemporaryDirectory(prefix="replayer-agent-") as tmp:
        home = Path(tmp)
        proj = Path(project).expanduser() if project else home / "project"
        if not proj.is_dir():
            proj.mkdir()
        with ModelServer(str(proj / "README.md")) as m:
            if agent.prepare:
                run(agent, exe, agent.prepare(m.url), home=home, project=proj, url=m.url)
            r, first, later = _requests(agent, exe, home, proj, m, one_process)
            subagents = _subagents(agent, exe, home, proj, m, first.body) if agent.subagents_own and first else {}
            compaction = _compaction(agent, exe, home, proj, m, first.body) if first else None
    if first is None:
        raise ReplayerError(f"{agent.label} sent no request to the stub (exit {r.returncode}): "
                            f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ['no output']}")
    cap = capture.from_request(agent.name, version, agent.api, first.body)
    if agent.reminders and agent.api == "chat":
        cap.first_user_prefix = capture.prefix_parts(first.body, PROMPT)
        cap.later_user_prefix = capture.prefix_parts(later.body, LATER) if later is not None else []
        cap.one_process = one_process
    cap.project, cap.home, cap.date = str(proj), str(home), time.strftime("%Y-%m-%d", time.gmtime())
    cap.subagents = subagents
    cap.compaction = compaction
    return cap, capture.save(cap)


def _subagents(agent: Agent, exe: Path, home: Path, proj: Path, m: ModelServer, main: dict) -> dict[str, dict]:
    """Each subagent type's own request (Qwen Code: its ``agent`` tool's general-purpose type): one
    more run, on a prompt the stub answers with the subagent tool. The subagent's request is the
    one with tools whose system prompt is not the main agent's; its type is the one its own file
    records (the key an import of that file looks up); the text parts before its task are the
    ones it sends before every task (skills listing, environment)."""
    from replayer.core.session import load_session

    n = len(m.log)
    run(agent, exe, agent.prompt(SUBAGENT), home=home, project=proj, url=m.url)
    own = capture.from_request(agent.name, "", agent.api, main).system_prompt
    sent = [q for q in m.log[n:] if q.body.get("tools")
            and capture.from_request(agent.name, "", agent.api, q.body).system_prompt != own]
    files = sorted(home.glob(agent.subagents_own or ""))
    if not sent or not files:
        return {}
    try:
        kind = load_session(files[-1]).subagent_type
    except ReplayerError:
        return {}
    body = sent[0].body
    c = capture.from_request(agent.name, "", agent.api, body)
    users = [x for x in body.get("messages") or [] if x.get("role") == "user"]
    parts = users[0].get("content") if users and isinstance(users[0].get("content"), list) else []
    task = parts[-1].get("text") if parts and isinstance(parts[-1], dict) else None
    return {kind or "": {"system_prompt": c.system_prompt, "tools": c.tools,
                         "first_user_prefix": capture.prefix_parts(body, task) if task else []}}


def _compaction(agent: Agent, exe: Path, home: Path, proj: Path, m: ModelServer, main: dict) -> dict | None:
    """The agent's summarization request (its prompt, and what else it sends with it): one more
    run that compacts the session just made (``Agent.compact_capture``, else ``compact``); its
    first request is the summarization (Claude Code's ``/compact``, Codex compacting before the
    turn when the context passes its limit, pi's RPC ``compact``)."""
    args = agent.compact_capture or agent.compact
    if not args:
        return None
    n = len(m.log)
    if agent.compact_commands and args is agent.compact:
        run_commands(agent, exe, args, agent.compact_commands, home=home, project=proj, url=m.url)
    else:
        run(agent, exe, args, home=home, project=proj, url=m.url)
    if len(m.log) == n:
        return None
    return capture.compaction_of(agent.name, agent.api, m.log[n].body, main)


def _requests(agent: Agent, exe: Path, home: Path, proj: Path, m: ModelServer, one_process: bool):
    """(the run's result, the first request with tools, the one for the later prompt or None)."""
    if one_process:
        r = run_commands(agent, exe, agent.prompts_stdin, [user_message(PROMPT), user_message(LATER)],
                         home=home, project=proj, url=m.url)
    else:
        r = run(agent, exe, agent.prompt(PROMPT), home=home, project=proj, url=m.url)
    first = next((q for q in m.log if q.body.get("tools")), None) or (m.log[0] if m.log else None)
    if not (agent.reminders and first is not None):
        return r, first, None
    if not one_process and agent.resume:
        run(agent, exe, agent.resume(LATER), home=home, project=proj, url=m.url)
    later = next((q for q in m.log if q.body.get("tools") and _ends_with(q.body, LATER)), None)
    return r, first, later


def _ends_with(body: dict, prompt: str) -> bool:
    """Whether a chat request's last message is a user message ending with ``prompt``."""
    msgs = body.get("messages") or [{}]
    c = msgs[-1].get("content")
    last = c[-1].get("text") if isinstance(c, list) and c and isinstance(c[-1], dict) else c
    return msgs[-1].get("role") == "user" and last == prompt
