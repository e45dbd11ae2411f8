"""OpenCode's older JSON storage tree, read as untrusted files: every id checked before it
becomes part of a path, every file resolved and confined to its folder, every record read bounded
and only from a regular file. (Kept apart from ``opencode`` so the importer's own logic — history,
compactions, parts — reads on its own.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ImportFailed, ReplayerError
from replayer.core.session import salvage
from replayer.core.textfile import read_bytes

#: OpenCode's ids (``ses_…``, ``msg_…``, ``prt_…``: a prefix and 26 base-62 characters), with room
#: for other writers; anything else (``../x``, ``/etc``, 5,000 characters) is refused before it
#: becomes part of a path
_ID_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def checked_id(value: Any, what: str) -> str:
    """A stored id safe to use as one folder name, or a one-line refusal naming it."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or ".." in value:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else f"{shown[:40]}…' ({len(str(value)):,} characters)"
        raise ImportFailed(f"the OpenCode storage holds an invalid {what} id {shown}: refused (ids are up to 128 "
                           "letters, digits, '_', '-' or '.')")
    return value


def session_files(root: Path) -> list[Path]:
    """``root/session/<project>/*.json`` that are regular files inside ``root/session``."""
    base = (root / "session").resolve()
    out = []
    for f in (root / "session").glob("*/*.json"):
        try:
            real = f.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # a broken link is no session
        if real.is_relative_to(base) and real.is_file():
            out.append(f)
    return out


def stored_files(root: Path, kind: str, owner: Any, what: str) -> list[Path]:
    """``root/kind/<owner id>/*.json``, each resolved and confined to ``root/kind``: the id comes
    from the untrusted folder, and a symlinked file or folder must not reach the rest of the disk."""
    folder = root / kind / checked_id(owner, what)
    base = (root / kind).resolve()
    out = []
    try:
        files = sorted(folder.glob("*.json"))
    except OSError as exc:
        raise ImportFailed(f"cannot read {folder}: {exc.strerror or exc}") from None
    for f in files:
        try:
            real = f.resolve(strict=True)
        except (OSError, RuntimeError):
            raise ImportFailed(f"cannot read {f}: a broken or looping link") from None
        if not real.is_relative_to(base):
            raise ImportFailed(f"{f} points outside the OpenCode storage folder ({kind}/): refused")
        out.append(f)
    return out


def loads_object(data: Any) -> dict:
    try:
        obj = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}


#: one stored message or part (a tool's output can be large, not this large)
MAX_RECORD_BYTES = 64 << 20


def admitted(root: Path, files: list[Path]) -> list[dict]:
    """The stored records, each named by its path under the storage folder (a record with a
    field that cannot be read is left out by that name)."""
    out = []
    for f in files:
        r = salvage.admit(read_json(f), f.relative_to(root).as_posix())
        if r is not None:
            out.append(r)
    return out


def read_json(p: Path) -> dict:
    """One stored object, read bounded and only from a regular file (a FIFO would block)."""
    try:
        return loads_object(read_bytes(p, "OpenCode record", MAX_RECORD_BYTES))
    except ReplayerError as exc:
        raise ImportFailed(str(exc)) from None


def quiet_json(p: Path) -> dict:
    """A stored object, or nothing when it cannot be read (a session file looked at in passing)."""
    try:
        return read_json(p)
    except ImportFailed:
        return {}
