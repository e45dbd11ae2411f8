"""``replayer agents``: capture what the user's own agent CLI sends (system prompt, tools)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _out(text: str) -> None:
    """Through the redaction policy, as every CLI output (replayer.cli imports this module)."""
    from replayer.core.redact import redact

    sys.stdout.write(redact(text) + "\n")
    sys.stdout.flush()


def cmd_agents(args: argparse.Namespace) -> int:
    from replayer.core.agents import capture
    from replayer.core.agents.registry import AGENTS

    if args.agents_cmd == "capture":
        from replayer.core.agents.capture_run import capture_agent

        cap, path = capture_agent(args.agent, binary=args.binary, project=args.project,
                                  one_process=args.one_process)
        _out(f"{cap.agent} {cap.version}: system prompt {len(cap.system_prompt or ''):,} characters "
             f"({cap.system_role}), {len(cap.tools)} tools, ~{capture.estimated_tokens(cap):,} tokens → {path}"
             + "".join(f"\n  subagent {k}: system prompt {len(v.get('system_prompt') or ''):,} characters, "
                       f"{len(v.get('tools') or [])} tools" for k, v in cap.subagents.items())
             + (f"\n  compaction: summarization prompt {len(cap.compaction.get('prompt') or ''):,} characters, "
                f"the conversation's system prompt: {cap.compaction.get('system')}, tools: {cap.compaction.get('tools')}"
                if cap.compaction else "")
             + "".join(f"\n  note: {n}" for n in cap.notes))
        return 0
    lines = []
    for a in AGENTS.values():
        cap = capture.load_latest(a.name)
        lines.append(f"{a.name:8} {a.label:12} {a.package} (tested {a.version})  "
                     + (f"captured {cap.version}" if cap else "not captured"))
    _out("\n".join(lines))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("agents", help="the agent CLIs: capture the system prompt and tools they send")
    p.set_defaults(func=cmd_agents, agents_cmd="list")
    s = p.add_subparsers(dest="agents_cmd", metavar="ACTION")
    s.add_parser("list", help="the known agents and their captures")
    c = s.add_parser("capture", help="run your installed agent once against a local stub model (in a temporary "
                     "HOME) and keep the system prompt and tools it sends")
    c.add_argument("agent", help="pi | codex | claude | qwen | cline | opencode | gemini | continue | kilo")
    c.add_argument("--binary", help="the agent's executable (default: found on PATH)")
    c.add_argument("--project", help="the session's project folder, for the prompt's working-directory parts "
                   "(default: an empty temporary folder)")
    c.add_argument("--one-process", action="store_true",
                   help="Qwen Code: capture as one process reading two prompts (its stream-json input, as an "
                   "SDK client runs it), for sessions of several prompts in one run; its date reminder then "
                   "comes before the first prompt only, and its prompt and tools are that mode's")
