"""The active branch of a session stored as a tree of records linked to their parent.

Claude Code (``parentUuid``), pi (``parentId``) and the llama.cpp web UI (``parent``) keep
edits, retries and regenerations as sibling branches; what an agent sends on resume is the
path from one leaf up to the root. The files are untrusted, so the walk stops at a missing
parent, at a parent link that is not a usable key, and at a cycle.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any


def path_to_root(leaf: dict | None, by_id: Mapping[Any, dict], *, id_key: str, parent_key: str) -> list[dict]:
    """The records from the root down to ``leaf`` (root first)."""
    path: list[dict] = []
    seen: set[Any] = set()
    node = leaf
    while node is not None:
        key = node.get(id_key)
        if not isinstance(key, Hashable):  # a list as id: nothing can name it as parent
            path.append(node)
            break
        if key in seen:
            break
        seen.add(key)
        path.append(node)
        pid = node.get(parent_key)
        node = by_id.get(pid) if isinstance(pid, Hashable) else None
    path.reverse()
    return path
