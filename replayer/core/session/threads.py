"""The threads of a session besides its main one: each subagent's conversation, as it was sent.

Where each agent keeps them:

* Claude Code 2.1.x: ``<session>/subagents/agent-*.jsonl``; 2.0.x: ``agent-*.jsonl`` beside the
  session, told apart by the ``sessionId`` of their first record. A thread per file, named by
  its stem.
* Claude Code 1.0.x: inside the main file, as ``isSidechain`` records; a thread per sidechain
  root (``claude_code.sidechains``), named ``sidechain-1``, ``sidechain-2``, … in file order.
* OpenCode: child sessions (``parent_id`` in the database, ``parentID`` in the storage folder)
  that its task tool starts; a thread per descendant session, named by its id.
* Qwen Code: ``<project>/subagents/<session>/agent-*.jsonl`` (``qwen_code.subagent_files``), a
  thread per file, named by its stem.
* Gemini CLI: ``chats/<session id>/<subagent session>.jsonl`` (``gemini_cli.subagent_files``), a
  thread per file, named by its stem.
* Codex: a rollout per subagent that its ``spawn_agent`` tool starts (``codex.children``); a
  thread per rollout, named by the subagent's thread id.
* Cline (the CLI): ``agent_<id>.messages.json`` beside the session for each subagent its
  ``spawn_agent`` tool starts (``cline.subagent_files``), a thread per file, named by its id.

Each thread says when its requests were sent, so that ``turns`` can put them between the main
thread's turns: Claude Code's ``api-request`` records or each response's first record; for
OpenCode each response's own time (its step's start where the database has it); for Codex the
time of each response's first stored item.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from replayer.core.errors import ReplayerError
from replayer.core.session import load_session
from replayer.core.session.formats import claude_code, claude_wire, cline, codex, gemini_cli, opencode, qwen_code
from replayer.core.session.model import Session
from replayer.core.session.reader import JsonlFile, iso_to_s, read_records

#: where each format's threads come from, for the notes
SOURCE = {"file": "the per-agent files", "sidechain": "the sidechain records in the file",
          "child": "the child sessions", "rollout": "the subagents' rollouts"}


@dataclass(frozen=True)
class SubThread:
    name: str
    source: str  # a key of SOURCE
    load: Callable[[], Session]  # the thread's conversation, as its agent sent it
    times: Callable[[Session], list[float | None]]  # when each of its requests was sent, in order


def sub_threads(s: Session, path: Path, images: str = "omit", once: JsonlFile | None = None) -> list[SubThread]:
    """The session's other threads, in the order their agent started them (none for a format
    that records none). ``once``: the session's file as ``main_times`` reads it, so that its
    sidechains and times parse it once between them (each per-agent file is parsed once too)."""
    if s.format == "claude-code":
        out = []
        for f in subagent_files(path, s.session_id):
            own = JsonlFile(f)  # read by its load and its times
            out.append(SubThread(f.stem, "file", _loader(f, "claude-code", images, once=own),
                                 lambda _s, f=f, own=own: request_times(f, once=own)))
        if not s.stats.sidechain_records:  # the main import counted them: no second read without
            return out
        once = once if once is not None else JsonlFile(path)
        try:
            records, _, _ = read_records(path, "Claude Code", once)
        except (ReplayerError, OSError):  # the main import read it; a file gone since has no sidechains
            return out
        for k, root in enumerate(claude_code.sidechains(records), 1):
            out.append(SubThread(f"sidechain-{k}", "sidechain",
                                 _loader(path, "claude-code", images, thread=root, once=once),
                                 lambda _s, root=root: request_times(path, root, once)))
        return out
    if s.format in ("opencode", "kilo") and s.session_id:  # Kilo's CLI keeps OpenCode's tables
        try:
            found = opencode.children(path, s.session_id)
        except ReplayerError:  # the main import read it: a database gone bad since has no children
            return []
        return [SubThread(c, "child", _loader(path, s.format, images, session_id=c), message_times) for c in found]
    if s.format == "qwen-code":
        return [SubThread(f.stem, "file", _loader(f, "qwen-code", images), message_times)
                for f in qwen_code.subagent_files(path, s.session_id)]
    if s.format == "gemini-cli":
        return [SubThread(f.stem, "file", _loader(f, "gemini-cli", images), message_times)
                for f in gemini_cli.subagent_files(path, s.session_id)]
    if s.format == "cline":
        return [SubThread(f.name.removesuffix(".messages.json"), "file", _loader(f, "cline", images), message_times)
                for f in cline.subagent_files(path, s.session_id)]
    if s.format == "codex" and s.session_id:
        try:
            rollouts = codex.children(path, s.session_id)
        except ReplayerError:  # the main import read it: a file gone bad since has no children
            return []
        return [SubThread(tid, "rollout", _loader(f, "codex", images), message_times) for tid, f in rollouts]
    return []


def loaded(subs: list[SubThread], notes: list[str]) -> list[tuple[SubThread, Session]]:
    """Each thread with its conversation; one that cannot be read is left out with a note (the
    main thread and the others stand)."""
    out = []
    for sub in subs:
        try:
            out.append((sub, sub.load()))
        except ReplayerError as exc:
            notes.append(f"subagent thread {sub.name} left out: {exc}")
    return out


def main_times(s: Session, path: Path, once: JsonlFile | None = None) -> list[float | None]:
    """When each request of the main thread was sent, in order (``once``: as for ``sub_threads``)."""
    if s.format == "claude-code":
        return request_times(path, once=once)
    return message_times(s)


def message_times(s: Session) -> list[float | None]:
    """The time of each response (a run of assistant messages) of an imported session: the k-th
    answers the k-th request, as ``turns.load_turns`` orders them — the responses of each history
    before a compaction first (``Session.earlier``), then the session's own. A response at the
    very start, or among what a compaction left (``compacted_prefix``: it answered the history
    before it or the summarization request), answers no request of the session; a history that
    ends with its summarization request has a turn whose response is not in it (no time)."""
    out: list[float | None] = []
    for h in s.earlier:
        out += _response_times(h.messages, h.compacted_prefix) + ([None] if h.ends_with_request else [])
    return out + _response_times(s.messages, s.compacted_prefix)


def _response_times(messages: list, prefix: int) -> list[float | None]:
    return [m.timestamp for i, m in enumerate(messages)
            if m.role == "assistant" and i > 0 and i >= prefix and messages[i - 1].role != "assistant"]


def _loader(path: Path, fmt: str, images: str, **which: Any) -> Callable[[], Session]:
    return lambda: load_session(path, fmt, images=images, **which)


def subagent_files(path: Path, session_id: str | None) -> list[Path]:
    """The subagents' own transcripts of the Claude Code session at ``path``: 2.1.x writes them
    under ``<session>/subagents/agent-*.jsonl``; 2.0.x wrote ``agent-*.jsonl`` beside the
    session, told apart by the ``sessionId`` of their first record."""
    if path.name.startswith("agent-"):
        return []
    found = sorted((path.parent / path.stem / "subagents").glob("agent-*.jsonl"))
    if session_id:
        for f in sorted(path.parent.glob("agent-*.jsonl")):
            try:
                with f.open("rb") as fh:
                    head = json.loads(fh.readline(1 << 20) or b"{}")
            except (OSError, ValueError):
                continue
            if isinstance(head, dict) and head.get("sessionId") == session_id:
                found.append(f)
    return found


def request_times(path: Path, sidechain: str | None = None, once: JsonlFile | None = None) -> list[float | None]:
    """When each request of a Claude Code file's own thread (or of its sidechain rooted at
    ``sidechain``) was sent, in order: Claude Code's own ``api-request`` records when it wrote
    them, else the time each API response began (its first record; the k-th is the reply to
    the k-th request). Either dates a request also when the messages are rebuilt from the wire
    records (which carry no times)."""
    records, _, _ = read_records(path, "Claude Code", once)
    if sidechain is not None:
        records = claude_code.sidechains(records).get(sidechain, [])
    sent = claude_wire.request_times(records)
    if sent:
        return [iso_to_s(t) for t in sent]
    side = not any(not r.get("isSidechain") for r in records if r.get("type") in ("user", "assistant"))
    out: list[float | None] = []
    seen: set = set()
    for r in records:
        msg = r.get("message") if isinstance(r.get("message"), dict) else {}
        if r.get("type") != "assistant" or bool(r.get("isSidechain")) != side or msg.get("model") == "<synthetic>" \
                or r.get("isApiErrorMessage"):
            continue
        key = (msg.get("id"), r.get("requestId") or r.get("requestRef"))
        if key[0] is None or key not in seen:
            seen.add(key)
            out.append(iso_to_s(r.get("timestamp")))
    return out
