"""Sessions in the agents' default folders, newest first (the app's start screen)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path



@dataclass(frozen=True)
class Found:
    path: Path
    agent: str
    mtime: float
    size: int


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def default_roots() -> list[tuple[str, Path, str]]:
    """(agent, folder, glob) per agent, honouring each agent's env overrides."""
    home = _home()
    pi_dir = os.environ.get("PI_CODING_AGENT_SESSION_DIR")
    if pi_dir:
        pi_root = Path(pi_dir).expanduser()
        pi_glob = "*.jsonl"
    else:
        agent_dir = Path(os.environ.get("PI_CODING_AGENT_DIR") or home / ".pi" / "agent").expanduser()
        pi_root, pi_glob = agent_dir / "sessions", "*/*.jsonl"
    claude = Path(os.environ.get("CLAUDE_CONFIG_DIR") or home / ".claude").expanduser() / "projects"
    codex = Path(os.environ.get("CODEX_HOME") or home / ".codex").expanduser() / "sessions"
    xdg = os.environ.get("XDG_DATA_HOME")
    opencode = (Path(xdg) if xdg else home / ".local" / "share") / "opencode"
    # Gemini CLI: ``$GEMINI_CLI_HOME`` replaces the home it keeps ``.gemini`` in; a subagent's chat
    # sits one folder deeper (``chats/<parent session>/``) and is read as its parent's thread
    gemini = Path(os.environ.get("GEMINI_CLI_HOME") or home).expanduser() / ".gemini" / "tmp"
    cont = Path(os.environ.get("CONTINUE_GLOBAL_DIR") or home / ".continue").expanduser() / "sessions"
    return [
        ("pi", pi_root, pi_glob),
        ("claude-code", claude, "*/*.jsonl"),
        ("codex", codex, "*/*/*/rollout-*.jsonl"),
        ("opencode", opencode, "opencode.db"),
        ("qwen-code", home / ".qwen" / "projects", "*/chats/*.jsonl"),
        ("gemini-cli", gemini, "*/chats/session-*.json*"),
        ("continue", cont, "*-*.json"),  # not its sessions.json index
    ]


def discover(limit: int = 2000) -> list[Found]:
    found: list[Found] = []
    for agent, root, pattern in default_roots():
        if not root.is_dir():
            continue
        try:
            for p in root.glob(pattern):
                try:
                    st = p.stat()
                except OSError:
                    continue
                if p.is_file() and st.st_size > 0:
                    found.append(Found(p, agent, st.st_mtime, st.st_size))
        except OSError:
            continue
    found.sort(key=lambda f: f.mtime, reverse=True)
    return found[:limit]
