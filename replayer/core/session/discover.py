"""Sessions in the agents' default folders, newest first (the app's start screen).

Cline's folders, read from its sources (``cline/cline``): the CLI, and since the SDK the VS Code
extension too, keep each session in ``~/.cline/data/sessions/<id>/<id>.messages.json``
(``resolveSessionDataDir``: ``CLINE_SESSION_DATA_DIR``, else ``CLINE_DATA_DIR``/sessions, else
``CLINE_DIR`` or ``~/.cline``, then ``data/sessions``); a subagent's file sits beside its parent's
under another name. The VS Code extensions before it — Cline, and its forks Roo Code and Kilo
Code — keep a task in the editor's ``globalStorage/<extension id>/tasks/<id>/
api_conversation_history.json``; the globalStorage folder is the editor's (VS Code, Insiders,
VSCodium, Cursor) under the user's config folder of each OS, or VS Code Server's. Kilo Code's CLI before 1.0 ran the
extension with ``~/.kilocode/cli/global`` as its globalStorage.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

#: the VS Code extensions that write Cline's task folders: (agent, extension id as globalStorage names it)
CLINE_EXTENSIONS = (("cline", "saoudrizwan.claude-dev"), ("roo-code", "rooveterinaryinc.roo-cline"),
                    ("kilo-code", "kilocode.kilo-code"))
#: the editors whose ``User/globalStorage`` may hold them (their folder names under the config folder)
EDITORS = ("Code", "Code - Insiders", "VSCodium", "Cursor")
CLINE_TASK_GLOB = "tasks/*/api_conversation_history.json"


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
    # Kilo's CLI: ``kilo.db`` in its data folder (``kilo-<channel>.db`` for a channel other than
    # latest/beta/prod); ``$KILO_DB`` replaces it, a relative name within that folder
    kilo, kilo_glob = opencode.with_name("kilo"), "kilo*.db"
    if (kilo_db := os.environ.get("KILO_DB")) and kilo_db != ":memory:":
        db = kilo / Path(kilo_db).expanduser()
        kilo, kilo_glob = db.parent, db.name
    # Gemini CLI: ``$GEMINI_CLI_HOME`` replaces the home it keeps ``.gemini`` in; a subagent's chat
    # sits one folder deeper (``chats/<parent session>/``) and is read as its parent's thread
    gemini = Path(os.environ.get("GEMINI_CLI_HOME") or home).expanduser() / ".gemini" / "tmp"
    cont = Path(os.environ.get("CONTINUE_GLOBAL_DIR") or home / ".continue").expanduser() / "sessions"
    return [
        ("pi", pi_root, pi_glob),
        ("claude-code", claude, "*/*.jsonl"),
        ("codex", codex, "*/*/*/rollout-*.jsonl"),
        ("opencode", opencode, "opencode.db"),
        ("kilo", kilo, kilo_glob),
        ("qwen-code", home / ".qwen" / "projects", "*/chats/*.jsonl"),
        ("gemini-cli", gemini, "*/chats/session-*.json*"),
        ("continue", cont, "*-*.json"),  # not its sessions.json index
        ("cline", cline_sessions_dir(), "*/*.messages.json"),
        *[(agent, storage / ext, CLINE_TASK_GLOB) for storage in global_storage_dirs()
          for agent, ext in CLINE_EXTENSIONS],
        ("kilo-code", home / ".kilocode" / "cli" / "global", CLINE_TASK_GLOB),
        *[("crush", d, "crush.db") for d in crush_data_dirs()],
        # Goose: ``sessions/sessions.db`` in its data folder (block/goose ``session_manager.rs``)
        ("goose", (Path(xdg) if xdg else home / ".local" / "share") / "goose" / "sessions", "sessions.db"),
        # mini-swe-agent: ``mini`` saves ``last_mini_run.traj.json`` in its config folder
        # (``MSWEA_GLOBAL_CONFIG_DIR``, else platformdirs' ``user_config_dir("mini-swe-agent")``)
        ("mini-swe-agent", Path(os.environ.get("MSWEA_GLOBAL_CONFIG_DIR") or Path(
            os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "mini-swe-agent").expanduser(), "*.traj.json"),
    ]


#: how much of Crush's project list is read, and how many of its projects listed
CRUSH_LIST_BYTES, CRUSH_PROJECTS = 1 << 20, 200


def crush_data_dirs() -> list[Path]:
    """Each project's Crush data folder (``<project>/.crush``, or the one its config names), from
    the list Crush keeps beside its global data (``projects.json``, charmbracelet/crush
    ``internal/projects``: in ``$CRUSH_GLOBAL_DATA``, ``$XDG_DATA_HOME/crush`` or
    ``~/.local/share/crush``): its databases are per project, found nowhere else. Read bounded;
    an entry that is not an absolute folder path is skipped, a list that cannot be read gives none."""
    from replayer.core.errors import ReplayerError
    from replayer.core.textfile import read_bytes

    base = os.environ.get("CRUSH_GLOBAL_DATA") or (Path(os.environ["XDG_DATA_HOME"]) / "crush"
                                                  if os.environ.get("XDG_DATA_HOME") else None)
    listing = Path(base or _home() / ".local" / "share" / "crush") / "projects.json"
    if not listing.is_file():
        return []
    try:
        import orjson

        doc = orjson.loads(read_bytes(listing, "Crush's project list", CRUSH_LIST_BYTES))
    except (ReplayerError, ValueError, OSError):
        return []
    projects = doc.get("projects") if isinstance(doc, dict) else None
    dirs = [Path(d) for p in (projects if isinstance(projects, list) else [])[:CRUSH_PROJECTS]
            if isinstance(p, dict) and isinstance(d := p.get("data_dir"), str) and os.path.isabs(d)]
    return list(dict.fromkeys(dirs))


def cline_sessions_dir() -> Path:
    """Where the Cline CLI (and the SDK-based extension) writes its sessions, with its overrides."""
    sessions = os.environ.get("CLINE_SESSION_DATA_DIR", "").strip()
    if sessions:
        return Path(sessions).expanduser()
    data = os.environ.get("CLINE_DATA_DIR", "").strip()
    if data:
        return Path(data).expanduser() / "sessions"
    base = os.environ.get("CLINE_DIR", "").strip()
    return (Path(base).expanduser() if base else _home() / ".cline") / "data" / "sessions"


def global_storage_dirs() -> list[Path]:
    """Each editor's ``User/globalStorage`` folder on this OS (an extension's data lives under it),
    and VS Code Server's (an editor connected over SSH, a container or WSL keeps it there)."""
    home = _home()
    if sys.platform == "darwin":
        config = home / "Library" / "Application Support"
    elif sys.platform == "win32":
        config = Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    else:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return [config / editor / "User" / "globalStorage" for editor in EDITORS] + \
        [home / ".vscode-server" / "data" / "User" / "globalStorage"]


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
