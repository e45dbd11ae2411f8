"""What a session list shows before importing anything: a clean title, and whether a file is a
session one can resume at all.

Claude Code's ``projects/<folder>/`` holds more than sessions: Task subagent transcripts
(``agent-*.jsonl``, only ``isSidechain`` records) and files with nothing but ``summary``
records (titles Claude Code writes for other sessions' leaves). Neither is a session the user
ran, so the picker hides them and says how many it hid, instead of listing them as
"cannot be read". Titles are the user's first prompt, which for a slash command is Claude
Code's markup (``<command-message>…</command-message><command-name>/init</command-name>``):
the command and its arguments are what the user typed.

A Cline CLI session's folder (``sessions/<id>/``) holds the session's ``<id>.messages.json`` and
one file per subagent or teammate it started (``agent_<id>.messages.json``, another stem): those
are threads of the session, listed with it, not sessions of their own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from replayer.core.session.formats.claude_code import text_of as prompt_text  # the importer's own reading
from replayer.core.session.discover import Found

HEAD_BYTES = 64 * 1024  # the first prompt and the session's folder are in the first records

_COMMAND = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
# blocks whose content is the agent's, not the user's words (Gemini CLI's environment context too)
_DROPPED = re.compile(r"<(system-reminder|local-command-stdout|local-command-stderr|command-message|session_context|hook_context)>.*?</\1>", re.S)
_TAG = re.compile(r"</?[A-Za-z][\w-]*(\s[^<>]*)?>")


def clean_title(text: str) -> str:
    """A prompt as a one-line title: a slash command as typed, agent markup removed."""
    command = _COMMAND.search(text)
    if command:
        args = _ARGS.search(text)
        text = f"{command.group(1).strip()} {args.group(1).strip() if args else ''}"
    else:
        text = _TAG.sub(" ", _DROPPED.sub(" ", text))
    return " ".join(text.split())


@dataclass(frozen=True)
class Listed:
    """One file of a session folder: what it is ('session', 'subagent', 'summary-only') and,
    when its head says so, its title and project folder."""

    found: Found
    kind: str = "session"
    title: str = ""
    project: str = ""


def claude_code_head(found: Found, head_bytes: int = HEAD_BYTES) -> Listed:
    """Classify a Claude Code file from its first ``head_bytes`` (read-only, bounded)."""
    try:
        with open(found.path, "rb") as f:
            head = f.read(head_bytes)
    except OSError:
        return Listed(found)
    complete = len(head) < head_bytes
    lines = head.split(b"\n")
    if not complete:
        lines = lines[:-1]  # the last line may be cut
    main = side = 0
    title, cwd, uuids, summaries = "", "", set(), []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict):
            continue
        kind = r.get("type")
        if kind == "summary" and isinstance(r.get("summary"), str):
            summaries.append((r.get("leafUuid"), r["summary"]))
            continue
        if kind not in ("user", "assistant"):
            continue
        if isinstance(r.get("uuid"), str):
            uuids.add(r["uuid"])
        if r.get("isSidechain"):
            side += 1
            continue
        main += 1
        cwd = cwd or (r.get("cwd") if isinstance(r.get("cwd"), str) else "")
        msg = r.get("message") if isinstance(r.get("message"), dict) else {}
        if kind == "user" and not title and not r.get("isMeta"):
            title = clean_title(prompt_text(msg.get("content")))
    if found.path.name.startswith("agent-") or (side and not main):
        return Listed(found, "subagent")
    if not main and complete:
        return Listed(found, "summary-only")
    title = next((s for leaf, s in summaries if leaf in uuids), "") or title
    return Listed(found, "session", title[:80], Path(cwd).name if cwd else "")


def cline_kind(found: Found) -> Listed:
    """A Cline CLI file: the session's own (its folder's name) or one of its subagents'."""
    p = found.path
    if p.name.endswith(".messages.json") and p.name != f"{p.parent.name}.messages.json":
        return Listed(found, "subagent")
    return Listed(found)


def listing(found: list[Found]) -> list[Listed]:
    """Every found file, classified (files of other agents are sessions as found)."""
    return [claude_code_head(f) if f.agent == "claude-code" else cline_kind(f) if f.agent == "cline" else Listed(f)
            for f in found]


def hidden_note(listed: list[Listed]) -> str:
    """'3 hidden: 2 subagent, 1 summary-only' (empty when none; short: the picker's status line)."""
    subs = sum(1 for x in listed if x.kind == "subagent")
    sums = sum(1 for x in listed if x.kind == "summary-only")
    parts = ([f"{subs} subagent"] if subs else []) + ([f"{sums} summary-only"] if sums else [])
    return f"{subs + sums} hidden: " + ", ".join(parts) if parts else ""
