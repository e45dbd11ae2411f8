"""Claude Code 1.0.x's Task subagents inside the main transcript: ``isSidechain`` records.

Apart from the importer so that it stays within the module size limit; ``claude_code.sidechains``
is this function."""

from __future__ import annotations

from replayer.core.session.registry import is_one_of

#: the record types of a conversation (as ``claude_code.CONVERSATIONAL``)
CONVERSATIONAL = {"user", "assistant", "system", "attachment"}


def sidechains(records: list[dict]) -> dict[str, list[dict]]:
    """Claude Code 1.0.x's Task subagents, written into the main file as ``isSidechain`` records:
    each subagent conversation by the uuid of its root (the first record of its ``parentUuid``
    chain that is a sidechain record), in file order. Empty for a file holding only sidechain
    records (a subagent's own file: that thread is the file's main one)."""
    side = {r["uuid"]: r for r in records if r.get("isSidechain") and isinstance(r.get("uuid"), str)
            and is_one_of(r.get("type"), CONVERSATIONAL)}
    if not side or not any(is_one_of(r.get("type"), CONVERSATIONAL) and not r.get("isSidechain") for r in records):
        return {}
    root_of: dict[str, str] = {}
    out: dict[str, list[dict]] = {}
    for u, r in side.items():
        walk, seen = [u], {u}
        while walk[-1] not in root_of:
            p = side[walk[-1]].get("parentUuid")
            if not isinstance(p, str) or p not in side or p in seen:  # a root (or a loop: cut there)
                root_of[walk[-1]] = walk[-1]
                break
            walk.append(p)
            seen.add(p)
        root = root_of[walk[-1]]
        root_of.update((w, root) for w in walk)
        out.setdefault(root, []).append(r)
    return out
