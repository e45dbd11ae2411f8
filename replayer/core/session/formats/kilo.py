"""Kilo's CLI (``@kilocode/cli`` 7.x, an OpenCode fork): ``~/.local/share/kilo/kilo.db``.

The database has OpenCode's ``session``/``message``/``part`` tables (and Kilo's own, ``kilo_*``),
read by OpenCode's importer. What Kilo adds at send time and stores nowhere: after every user
message's parts, an ``<environment_details>`` text part (``KiloSessionPrompt.injectEditorContext``
of 7.7.7's bundle), built from the message's creation time, the session's folder and its
workspace root, and the editor context a VS Code or JetBrains client stored on the message. A
stored synthetic part that already begins with ``<environment_details>`` is sent instead, so
nothing is added then. Its system prompt and tools are not stored (``replayer agents capture
kilo``).
"""

from __future__ import annotations

import posixpath
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from replayer.core.session.formats import opencode
from replayer.core.session.model import Session
from replayer.core.session.registry import Head, Importer, LoadOptions
from replayer.core.session.sqlite_ro import table_names

FORMAT = "kilo"


def _iso_seconds(ms: Any) -> str | None:
    """JavaScript's ``toISOString()`` without its milliseconds, as Kilo prints the message time."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return None
    try:
        return datetime.fromtimestamp(int(ms // 1000), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def _worktree(directory: str, path: Any) -> str:
    """The workspace root: the session's folder with one ``..`` per segment of its stored
    ``path`` (the folder relative to the project's worktree), resolved as Node's ``path.resolve``."""
    ups = [".."] * len([p for p in path.split("/") if p]) if isinstance(path, str) else []
    return posixpath.normpath(posixpath.join(directory, *ups)) if ups else directory


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def environment_details(session: dict, message: dict, parts: list[dict]) -> str | None:
    """The ``<environment_details>`` block Kilo sends after the stored user ``message``, or None
    when its ``parts`` hold one already (or it has no creation time to print)."""
    if any(p.get("type") == "text" and p.get("synthetic") and str(p.get("text", "")).lstrip()
           .startswith("<environment_details>") for p in parts):
        return None
    created = _iso_seconds((message.get("time") or {}).get("created"))
    if created is None:
        return None
    ctx: dict[str, Any] = {}
    if isinstance(d := session.get("directory"), str) and d:
        ctx = {"directory": d, "worktree": _worktree(d, session.get("path"))}
    if isinstance(editor := message.get("editorContext"), dict):
        ctx |= editor
    lines = [f"Message time: {created}"]
    for key, label in (("directory", "Working directory"), ("worktree", "Workspace root folder"),
                       ("activeFile", "Active file")):
        if ctx.get(key):
            lines.append(f"{label}: {ctx[key]}")
    for key, label in (("visibleFiles", "Visible files:"), ("openTabs", "Open tabs:")):
        if items := _strings(ctx.get(key)):
            lines += [label, *(f"  {i}" for i in items)]
    return "\n".join(["", "", "<environment_details>", *lines, "</environment_details>"])


KILO = opencode.Fork(FORMAT, "Kilo", environment_details)


def detect_head(head: Head) -> float:
    """An OpenCode-shaped database with Kilo's own tables."""
    if head.is_dir or head.bytes[:16] != opencode.SQLITE_MAGIC:
        return 0.0
    tables = table_names(head.path)
    return 1.0 if opencode.TABLES <= tables and any(t.startswith("kilo_") for t in tables) else 0.0


def load(path: Path, options: LoadOptions) -> Session:
    return opencode.load_db(path, options.session_id, images=options.images, fork=KILO)


IMPORTER = Importer(FORMAT, detect_head, load)
