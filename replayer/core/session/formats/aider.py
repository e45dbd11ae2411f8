"""Aider's ``.aider.chat.history.md``, split back the way ``--restore-chat-history`` does
(the whole file: every ``# aider chat started at`` session in it).

``####`` lines are user input, ``>`` lines are tool output (dropped), ``#`` lines are
headers; everything else is assistant markdown. Aider has no native tool calls, and its
real request adds a repo map and file contents that the history does not store.
"""

from __future__ import annotations

from pathlib import Path

from replayer.core.errors import ImportFailed, ReplayerError
from replayer.core.session.model import ImportStats, Message, Session
from replayer.core.session.registry import Head, Importer
from replayer.core.textfile import read_bytes

FORMAT = "aider"
MAX_HISTORY_BYTES = 256 << 20
MAGIC = "# aider chat started at"


def detect_text(head: str) -> bool:
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    return first.startswith(MAGIC)


def load(path: Path) -> Session:
    try:  # bounded: a history grows over many sessions, never to this
        data = read_bytes(path, "aider chat history", MAX_HISTORY_BYTES)
    except ReplayerError as exc:
        raise ImportFailed(str(exc)) from None
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    # --restore-chat-history reads the whole file: every chat session in it, not the last one
    lines = text.split("\n")
    n_sessions = sum(1 for ln in lines if ln.startswith(MAGIC))
    out: list[Message] = []
    role, buf = None, []

    def flush() -> None:
        nonlocal buf
        body = "\n".join(buf).strip()
        if role and body:
            if out and out[-1].role == role:
                out[-1].content = f"{out[-1].content}\n{body}"
            else:
                out.append(Message(role=role, content=body))
        buf = []

    for ln in lines:
        if ln.startswith("#### "):
            if role != "user":
                flush()
                role = "user"
            buf.append(ln[5:])
        elif ln.startswith("> ") or ln == ">":
            continue
        elif ln.startswith("#"):
            continue
        else:
            if role != "assistant":
                flush()
                role = "assistant"
            buf.append(ln)
    flush()
    if not out:
        raise ImportFailed(f"{path} has no chat turns")
    return Session(format=FORMAT, path=str(path), messages=out, system_prompt=None, tools=None,
                   stats=ImportStats(lines=len(lines), branch_length=len(out), entries_total=len(out)),
                   warnings=["aider's request also holds a repo map and file contents, not stored here"]
                   + ([f"{n_sessions} aider chat sessions in the file, all restored as one history "
                       "(as --restore-chat-history does)"] if n_sessions > 1 else []))


def detect_head(head: Head) -> float:
    return 1.0 if not head.is_dir and detect_text(head.text) else 0.0


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path))
