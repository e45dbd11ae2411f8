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

#: system prompt + tool schema characters the pinned agents sent on a first request (issue #22's
#: measurements), for the estimate of what a rebuild without them lacks
TYPICAL_CHARS = {"pi": (2300, 3000), "opencode": (9600, 14000), "codex": (19500, 14000),
                 "claude": (17000, 55000), "qwen": (14000, 20000), "cline": (30000, 0)}


@dataclass
class Parts:
    system_prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    system_role: str | None = None
    notes: list[str] = field(default_factory=list)


def captured_parts(session, *, need_prompt: bool, need_tools: bool) -> Parts:
    """The captured prompt/tools for what the session lacks (nothing when it lacks nothing)."""
    agent = agent_of_format(session.format)
    if agent is None or not (need_prompt or need_tools):
        return Parts()
    cap = capture.load(agent, session.agent_version or "") or capture.load_latest(agent)
    if cap is None:
        return Parts()
    out = Parts(system_role=cap.system_role)
    if need_prompt:
        out.system_prompt = cap.system_prompt
    if need_tools and cap.tools:
        out.tools = cap.tools
    which = " and ".join(w for w, used in (("system prompt", out.system_prompt is not None),
                                           (f"{len(cap.tools)} tools", out.tools is not None)) if used)
    if which:
        same = session.agent_version in (None, cap.version)
        out.notes.append(f"{which} from the capture of {AGENTS[agent].label} {cap.version}"
                         + ("" if same else f" (the session was written by {session.agent_version})"))
    return out


def missing_estimate(fmt: str, missing: list[str]) -> str:
    """`` (~N tokens, an estimate)`` for what a rebuild lacks, or "" for an unknown agent."""
    agent = agent_of_format(fmt)
    if agent not in TYPICAL_CHARS:
        return ""
    prompt, tools = TYPICAL_CHARS[agent]
    chars = (prompt if "system_prompt" in missing else 0) + (tools if "tools" in missing else 0)
    return f" (~{chars // 4:,} tokens missing, an estimate)" if chars else ""
