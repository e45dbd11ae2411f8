"""A session's missing system prompt and tools, filled from a capture of the agent that wrote it.

A capture is keyed by agent and version; a session written by another version of the agent
uses the nearest capture of that agent and says so, since prompts change between versions.
Where no capture exists, the notes carry an estimate of the tokens the rebuilt request lacks
(measured once per agent on the versions pinned in tests/agents, so a rough size only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS, agent_of_format

#: system prompt and tool schema characters each agent sent on a first request, measured with
#: ``replayer agents capture`` on the versions pinned in tests/agents (OpenCode: issue #22's
#: figure), for the estimate of what a rebuild without them lacks
TYPICAL_CHARS = {"pi": (2478, 2950), "opencode": (9600, 14000), "codex": (16979, 7245),
                 "claude": (6927, 31525), "qwen": (26971, 38761), "cline": (4279, 17253),
                 "continue": (1272, 6204), "gemini": (30277, 17722), "kilo": (13587, 36361)}


#: summarization prompt characters each agent sent (its first summarization request, measured on
#: the versions pinned in tests/agents), for the estimate of what a rebuild without a capture lacks
SUMMARY_CHARS = {"claude": 6361, "codex": 426, "opencode": 1929, "qwen": 3727}


@dataclass
class Parts:
    system_prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    system_role: str | None = None
    notes: list[str] = field(default_factory=list)
    first_user_prefix: list[str] = field(default_factory=list)
    later_user_prefix: list[str] = field(default_factory=list)


def captured_parts(session, *, need_prompt: bool, need_tools: bool) -> Parts:
    """The captured prompt/tools for what the session lacks (nothing when it lacks nothing)."""
    agent = agent_of_format(session.format)
    if agent is None:
        return Parts()
    if session.format_version == "subagent":  # a subagent's prompt and tools are not the main agent's
        return _subagent_parts(session, agent, need_prompt=need_prompt and session.system_prompt is None,
                               need_tools=need_tools)
    # a stored prompt wins, unless the agent is known to send another one
    need_prompt = need_prompt and (session.system_prompt is None or not AGENTS[agent].prompt_as_sent)
    if not (need_prompt or need_tools):
        return Parts()
    cap = capture.load(agent, session.agent_version or "") or capture.load_latest(agent)
    if cap is None:
        return Parts()
    out = Parts(system_role=cap.system_role)
    prompt, tools = capture.personalised(cap, session.cwd, session.created, home_of(session.path, AGENTS[agent]))
    if agent == "claude" and prompt is not None:
        prompt = _session_billing_header(session, prompt)
    if need_prompt and prompt is not None:
        out.system_prompt = prompt
        if session.system_prompt is not None:
            out.notes.append(f"the stored system prompt ({len(session.system_prompt):,} characters) is not what "
                             f"{AGENTS[agent].label} sends; the captured one ({len(cap.system_prompt):,}) is used")
    if need_tools and tools:
        out.tools = tools
        out.notes.extend(cap.notes)
    if AGENTS[agent].reminders and (cap.first_user_prefix or cap.later_user_prefix):
        out.first_user_prefix, out.later_user_prefix = capture.user_prefixes(
            cap, session.cwd, session.created, home_of(session.path, AGENTS[agent]))
        out.notes.append(f"the <system-reminder> parts {AGENTS[agent].label} adds before user prompts at send "
                         f"time are from the capture of {cap.version}; the file does not mark where a run "
                         "began, so " + ("the session is taken as one run, as the capture was made (one "
                                         "process: the date reminder before its first prompt only)"
                                         if cap.one_process else
                                         "each prompt is taken as a run of its own (its date reminder before it)"))
    which = " and ".join(w for w, used in (("system prompt", out.system_prompt is not None),
                                           (f"{len(cap.tools)} tools", out.tools is not None)) if used)
    if which:
        same = session.agent_version in (None, cap.version)
        out.notes.append(f"{which} from the capture of {AGENTS[agent].label} {cap.version}"
                         + ("" if same else f" (the session was written by {session.agent_version})"))
    return out


def _subagent_parts(session, agent: str, *, need_prompt: bool, need_tools: bool) -> Parts:
    """A subagent thread's prompt and tools. Cline gives a subagent its own built-in tools, a
    subset of the main agent's (``Agent.subagent_tools``; its prompt is in the parent's file);
    Qwen Code's subagent of each type has a prompt, tools and startup parts of its own, captured
    beside the main agent's (``Capture.subagents``, keyed by the type). Never the main agent's."""
    a = AGENTS[agent]
    kind = session.subagent_type
    cap = capture.load(agent, session.agent_version or "") or capture.load_latest(agent)
    own = cap.subagents.get(kind or "") if cap is not None else None
    if cap is None and a.subagent_tools is not None:
        return Parts(notes=[f"a {a.label} subagent is given the main agent's built-in tools, and {a.label} is not "
                            f"captured: its tools are missing (`replayer agents capture {agent}`)"])
    if cap is None or (own is None and a.subagent_tools is None):
        what = f" ({kind})" if kind else ""
        return Parts(notes=[f"a {a.label} subagent's prompt and tools{what} are not captured: the main agent's "
                            "capture is not used for them" + ("" if cap is None else
                                                              f" (the capture of {cap.version} has no {kind or 'such'} subagent)")])
    home = home_of(session.path, a)
    if own is None:  # Cline: the main agent's tools a subagent is given
        _, tools = capture.personalised(cap, session.cwd, session.created, home)
        kept = [t for t in tools if (t.get("function") or {}).get("name") in a.subagent_tools]
        return Parts(tools=kept if need_tools else None,
                     notes=[f"{len(kept)} of the {len(tools)} tools of the capture of {a.label} {cap.version}: "
                            "the ones its subagents are given"] if need_tools else [])
    sub = capture.Capture(agent, cap.version, cap.api, system_prompt=own.get("system_prompt"),
                          tools=own.get("tools") or [], first_user_prefix=own.get("first_user_prefix") or [],
                          project=cap.project, home=cap.home, date=cap.date)
    prompt, tools = capture.personalised(sub, session.cwd, session.created, home)
    first, _ = capture.user_prefixes(sub, session.cwd, session.created, home)
    return Parts(system_prompt=prompt if need_prompt else None, tools=tools if need_tools else None,
                 first_user_prefix=first,
                 notes=[f"the {kind} subagent's system prompt, {len(tools)} tools and the <system-reminder> parts "
                        f"before its task are from the capture of {a.label} {cap.version}"])


def missing_estimate(fmt: str, missing: list[str]) -> str:
    """`` (~N tokens, an estimate)`` for what a rebuild lacks, or "" for an unknown agent."""
    agent = agent_of_format(fmt)
    if agent not in TYPICAL_CHARS:
        return ""
    prompt, tools = TYPICAL_CHARS[agent]
    chars = (prompt if "system_prompt" in missing else 0) + (tools if "tools" in missing else 0)
    return f" (~{chars // 4:,} tokens missing, an estimate)" if chars else ""


def _session_billing_header(session, prompt: str) -> str:
    """A captured Claude Code prompt with the session's own billing-header fingerprint (and
    version) in place of the capture run's: the fingerprint is of the first prompt."""
    import re

    from replayer.core.session.formats.claude_wire import BILLING, fingerprint

    if not prompt.startswith(BILLING):
        return prompt
    m = re.match(r"x-anthropic-billing-header: cc_version=([0-9][0-9A-Za-z.+-]*?)\.[0-9a-f]{3};", prompt)
    if m is None:
        return prompt
    version = session.agent_version or m.group(1)
    first = next((x.text() for x in session.messages if x.role == "user"), "")
    return f"{BILLING} cc_version={version}.{fingerprint(first, version)};" + prompt[m.end():]


def home_of(path: str, agent) -> str | None:
    """The HOME a session file sits under, from the agent's session glob (``.qwen/projects/*/chats/*.jsonl``
    is four folders and a file below HOME)."""
    from pathlib import Path

    depth = len(Path(agent.sessions).parts)
    p = Path(path)
    for d in (depth, depth + 1):  # a subagent's file may sit one folder deeper (Qwen Code's)
        if len(p.parts) > d and (p.parents[d - 1] / Path(agent.sessions).parts[0]).is_dir():
            return str(p.parents[d - 1])
    return None


def startup_parts(parts: Parts) -> list[str]:
    """The parts before the first prompt that every request re-sends (Qwen Code's skills listing,
    environment context and deferred tools), without the run's own parts it ends with."""
    first, run = parts.first_user_prefix, parts.later_user_prefix
    if run and first[len(first) - len(run):] == run:
        return first[:len(first) - len(run)]
    return first


def add_user_prefixes(messages: list[dict[str, Any]], parts: Parts) -> RunParts | None:
    """Put the captured startup parts before the first user prompt of a rebuilt request, in place,
    and return the parts that go before the prompt opening each run (None: there are none).

    Qwen Code rebuilds the startup parts for every request from the first user message, but adds
    the date reminder only before a run's first prompt (``lastInjectedDate`` is reset when a
    chat starts or resumes) and keeps it in memory, never in the file: a resumed run re-sends
    the earlier prompts without it."""
    startup = startup_parts(parts)
    users = [m for m in messages if m.get("role") == "user"]
    if startup and users:
        users[0]["content"] = _with_texts(users[0].get("content"), startup, 0)
    if not parts.later_user_prefix:
        return None
    return RunParts(list(parts.later_user_prefix), len(startup))


def _with_texts(content: Any, texts: list[str], at: int) -> list[dict[str, Any]]:
    body = list(content) if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    return body[:at] + [{"type": "text", "text": t} for t in texts] + body[at:]


@dataclass
class RunParts:
    """Text parts an agent sends before the prompt that opened the run a request belongs to.

    The file does not mark where a run (one process of the agent) began, so the rebuild takes
    each user prompt as a run of its own, as ``qwen -p`` and ``qwen -c -p`` make them: a request
    carries the parts before its latest prompt only. (An interactive run of several prompts
    keeps them before its first one.)"""
    texts: list[str]
    first_offset: int  # on the first user message they follow the startup parts

    def place(self, messages: list[dict[str, Any]], u: int) -> list[dict[str, Any]]:
        """A copy of ``messages`` (none carrying the parts) with message ``u`` carrying them."""
        out = list(messages)
        first = next(i for i, m in enumerate(messages) if m.get("role") == "user")
        out[u] = {**messages[u], "content": _with_texts(messages[u].get("content"), self.texts,
                                                         self.first_offset if u == first else 0)}
        return out


@dataclass
class SummaryParts:
    """What a compaction's summarization request carries besides the history it was sent with:
    the agent's summarization prompt (None: not known) and whether its system prompt and tools
    are the conversation's (``"same"``), none, or its own (``system_prompt`` / ``tools``)."""
    prompt: str | None = None
    system: str = "none"
    tools: str = "none"
    system_prompt: str | None = None
    system_role: str = "system"
    own_tools: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)
    api: str = "chat"  # the agent's wire API (Anthropic's turns alternate: the prompt joins a user message)


def summarization_parts(session) -> SummaryParts:
    """The summarization request's parts for the session's agent: from a capture that ran a
    compaction (``Capture.compaction``), else what the agent is known to send
    (``Agent.summary_sends``) and a note with an estimate of the prompt's tokens missing."""
    agent = agent_of_format(session.format)
    if agent is None:
        return SummaryParts(notes=["the summarization request's prompt is not known for this format"])
    a = AGENTS[agent]
    cap = capture.load(agent, session.agent_version or "") or capture.load_latest(agent)
    comp = cap.compaction if cap is not None else None
    if comp and isinstance(comp.get("prompt"), str):
        own = comp.get("own_tools") if isinstance(comp.get("own_tools"), list) else None
        return SummaryParts(comp["prompt"], str(comp.get("system") or "none"), str(comp.get("tools") or "none"),
                            comp.get("system_prompt"), str(comp.get("system_role") or "system"), own,
                            [f"the summarization prompt is from the capture of {a.label} {cap.version}"], a.api)
    est = SUMMARY_CHARS.get(agent)
    size = f" (~{est // 4:,} tokens missing, an estimate)" if est else ""
    return SummaryParts(None, "same" if "prompt" in a.summary_sends else "none",
                        "same" if "tools" in a.summary_sends else "none",
                        notes=[f"the summarization request lacks {a.label}'s summarization prompt{size}: it is the "
                               f"agent's code, in no file (`replayer agents capture {agent}` records it)"], api=a.api)
