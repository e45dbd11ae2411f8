"""A JSONL file of chat-completions request bodies, one per line: a session whose lines are its turns.

This is what a logging proxy or a prompt log captures: every request exactly as the agent
sent it, so nothing about a turn has to be reconstructed (a changed system prompt, a
compaction, reordered tools are all in the lines). For the resume replay and ``inspect``
the session is its last request, imported like a single OpenAI body.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.formats import openai_body
from replayer.core.session.model import Session
from replayer.core.session.reader import JsonlStats, iter_jsonl
from replayer.core.session.registry import Head, Importer, jsonl_confidence

FORMAT = "chat-requests"


def detect(objs: list[dict[str, Any]]) -> bool:
    """Two or more lines, each an OpenAI body (``messages`` of role dicts)."""
    return len(objs) >= 2 and all(openai_body.detect(o) and o["messages"] for o in objs)


def read_bodies(path: Path) -> tuple[list[dict[str, Any]], JsonlStats]:
    jstats = JsonlStats()
    bodies = [o for o in iter_jsonl(path, jstats) if openai_body.detect(o) and o["messages"]]
    if not bodies:
        raise ImportFailed(f"{path} holds no chat-completions request bodies")
    return bodies, jstats


def load(path: Path, *, images: str = "omit") -> Session:
    bodies, jstats = read_bodies(path)
    s = openai_body.load(path, bodies[-1], images=images)
    stats, warnings = jstats.import_stats(len(bodies))
    s.format = FORMAT
    s.stats = stats
    s.warnings.extend(warnings)
    return s


def detect_head(head: Head) -> float:
    # before the agents' JSON-lines formats: a line that is a whole request body is none of theirs
    return jsonl_confidence(head, detect, 0.95)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images))
