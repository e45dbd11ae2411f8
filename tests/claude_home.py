"""A generated Claude Code home: hundreds of sessions, slash-command titles, subagent
transcripts and summary-only files, as ``~/.claude/projects`` holds them, and one session
whose Task subagents wrote their own transcripts (2.1.x: ``<session>/subagents/agent-*.jsonl``).

``python tests/claude_home.py DIR`` writes one (for trying the picker by hand: ``HOME=DIR replayer``).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

WORDS = "refactor parser cache slot batch test fix docs server build tokens prompt layout".split()


def _record(kind: str, uuid: str, parent: str | None, sid: str, cwd: str, content, sidechain=False) -> dict:
    msg = {"role": kind, "content": content}
    if kind == "assistant":
        msg.update(id=f"m-{uuid}", model="claude-x", content=[{"type": "text", "text": content}])
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": sid, "isSidechain": sidechain,
            "cwd": cwd, "version": "2.1.0", "timestamp": "2026-07-01T09:00:00Z", "message": msg}


def write_home(home: Path, n_sessions: int = 300, n_subagents: int = 7, n_summary_only: int = 3,
               seed: int = 1) -> list[Path]:
    """Write the home; returns the session files, newest first (their mtimes are one minute apart)."""
    rng = random.Random(seed)
    projects = home / ".claude" / "projects"
    sessions = []
    for i in range(n_sessions):
        project = f"-home-u-proj{i % 12}"
        folder = projects / project
        folder.mkdir(parents=True, exist_ok=True)
        sid = f"{i:08d}-aaaa-bbbb-cccc-000000000000"
        cwd = f"/home/u/proj{i % 12}"
        if i % 10 == 3:  # a slash command: Claude Code's markup around what was typed
            prompt = (f"<command-message>review is running…</command-message>\n<command-name>/review</command-name>"
                      f"\n<command-args>session {i}</command-args>")
        else:
            prompt = f"session {i}: " + " ".join(rng.choice(WORDS) for _ in range(8))
        recs = [_record("user", f"u{i}-1", None, sid, cwd, prompt),
                _record("assistant", f"a{i}-1", f"u{i}-1", sid, cwd, "ok " * (5 + i % 40)),
                _record("user", f"u{i}-2", f"a{i}-1", sid, cwd, "thanks " + " ".join(WORDS[: 1 + i % 9]))]
        path = folder / f"{sid}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        t = 1_780_000_000 - 60 * i
        os.utime(path, (t, t))
        sessions.append(path)
    for j in range(n_subagents):
        folder = projects / f"-home-u-proj{j % 12}"
        recs = [_record("user", f"s{j}-1", None, f"sub{j}", "/home/u", "subagent task", sidechain=True),
                _record("assistant", f"s{j}-2", f"s{j}-1", f"sub{j}", "/home/u", "done", sidechain=True)]
        (folder / f"agent-{j:04x}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    for j in range(n_summary_only):
        folder = projects / f"-home-u-proj{j % 12}"
        (folder / f"summary-{j}.jsonl").write_text(
            json.dumps({"type": "summary", "summary": f"Old work {j}", "leafUuid": f"gone-{j}"}) + "\n")
    return sessions


def _timed(kind: str, n: int, parent: str | None, sid: str, minute: int, text: str, agent: str | None = None) -> dict:
    rec = _record(kind, f"{agent or 'main'}-{kind[0]}{n}", parent, sid, "/home/u/threads", text, sidechain=bool(agent))
    rec["timestamp"] = f"2026-07-02T10:{minute:02d}:00Z"
    if agent:
        rec["agentId"] = agent
    return rec


def _exchanges(sid: str, minutes: list[int], words: int, agent: str | None = None) -> list[dict]:
    """A user message, then per minute an answer (one request each) and the next user message."""
    recs = [_timed("user", 0, None, sid, minutes[0], f"task for {agent or 'main'}: " + " ".join(WORDS), agent)]
    for n, minute in enumerate(minutes):
        recs.append(_timed("assistant", n, recs[-1]["uuid"], sid, minute, " ".join(WORDS[: 1 + n % 9]) * words, agent))
        recs.append(_timed("user", n + 1, recs[-1]["uuid"], sid, minute, f"go on {n}: " + " ".join(WORDS[n % 5:]), agent))
    return recs


def write_threaded_session(folder: Path, n_main: int = 12) -> Path:
    """A session of ``n_main`` + 1 main-thread requests with two subagents, whose sent
    requests fall between main turns 3 and 4 (agent ``a1b2c3d4``: 4) and 8 and 9 (``e5f6a7b8``: 3)."""
    folder.mkdir(parents=True, exist_ok=True)
    sid = "77777777-aaaa-bbbb-cccc-000000000000"
    path = folder / f"{sid}.jsonl"
    main_minutes = [m * 4 for m in range(n_main)]  # a main answer every four minutes
    path.write_text("".join(json.dumps(r) + "\n" for r in _exchanges(sid, main_minutes, 6)))
    subs = folder / sid / "subagents"
    subs.mkdir(parents=True, exist_ok=True)
    for agent, minutes in (("a1b2c3d4", [13, 14, 15, 15]), ("e5f6a7b8", [33, 34, 35])):
        # the last answer is the subagent's report: its request was the last one it sent
        recs = _exchanges(sid, minutes, 4, agent)[:-1]
        (subs / f"agent-{agent}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


if __name__ == "__main__":
    print(len(write_home(Path(sys.argv[1]))), "sessions written under", Path(sys.argv[1]) / ".claude/projects")
    print("with subagent threads:", write_threaded_session(Path(sys.argv[1]) / ".claude/projects/-home-u-threads"))
