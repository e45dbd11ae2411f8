"""What a real server did with one request, read from its ``-lv 4`` log: the slot, the host cache, the checkpoints.

The lines are those ``get_available_slot``, ``server_prompt_cache`` and the idle-slot save
log (``tools/server/server-context.cpp``, ``server-task.cpp``; docs/cache-rules.md):
"selected slot by LRU / LCP similarity / id", "saving prompt with length N, total state
size = X MiB" (an attempt: "prompt is already in the cache, skipping" and "exceeds cache
size limit, skipping" undo it), "found better prompt" (a load), "removing oldest entry"
(an eviction, either from ``update`` or, from b9940, "making room"), "removing obsolete
cached prompt", "purging slot N". Checkpoint lines are ``engine.logparse``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from replayer.core.engine.logparse import FULL_REPROCESS, parse_line, strip_colour

__all__ = ["LiveRequestFacts", "read_request", "relevant_lines"]

#: the ``-lv 4`` lines a maintainer reads to see what the server reused, batched, saved and
#: checkpointed (a repro bundle's ``logs/``); the sampler's settings, printed per task, are not
_RELEVANT = ("prompt processing", "checkpoint", "cache", "n_past", "forcing full", "prompt eval", "slot", "n_tokens")
_NOISE = ("sampler chain", "sampler params", "init sampler")
_MAX_LINE = 400  # a bounded line: what follows is a model's metadata or a template, not the server's decision


def relevant_lines(lines: Iterable[str]) -> list[str]:
    """The lines of ``lines`` that say what the server did with a prompt, without colour, each
    at most ``_MAX_LINE`` characters."""
    out = []
    for raw in lines:
        line = strip_colour(raw).rstrip()
        if any(k in line for k in _RELEVANT) and not any(k in line for k in _NOISE):
            out.append(line[:_MAX_LINE])
    return out

_SELECTED = re.compile(r"slot get_availabl: id\s+(\d+) \| task -?\d+ \| selected slot by (LRU|LCP similarity|id)")
_SAVING = re.compile(r"saving prompt with length (\d+), total state size = ([\d.]+) MiB")
_ALREADY = re.compile(r"prompt is already in the cache, skipping")
_OVERSIZE = re.compile(r"prompt state size ([\d.]+) MiB exceeds cache size limit")
_LOADED = re.compile(r"found better prompt with f_keep")
_EVICTED = re.compile(r"removing oldest entry \(size = ([\d.]+) MiB\)")
_OBSOLETE = re.compile(r"removing obsolete cached prompt with length (\d+)")
_PURGED = re.compile(r"purging slot (\d+) with (\d+) tokens")
_HOW = {"LRU": "lru", "LCP similarity": "lcp", "id": "id"}


@dataclass
class LiveRequestFacts:
    slot: int = -1
    selected: str = ""
    cache: list[tuple[str, int, float]] = field(default_factory=list)  # (kind, n_tokens or -1, MiB)
    purged: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)  # n_tokens of each checkpoint made
    erased: list[tuple[str, int]] = field(default_factory=list)
    restored: int | None = None
    full_reprocess: bool = False
    prompt_n: int | None = None  # the "prompt eval time" line's tokens


def read_request(lines: Iterable[str]) -> LiveRequestFacts:
    """The facts of the log lines one request caused, in order."""
    out = LiveRequestFacts()
    for raw in lines:
        line = strip_colour(raw)
        if (m := _SELECTED.search(line)):
            out.slot, out.selected = int(m.group(1)), _HOW[m.group(2)]
        elif (m := _SAVING.search(line)):
            out.cache.append(("saved", int(m.group(1)), float(m.group(2))))
        elif _ALREADY.search(line):
            if out.cache and out.cache[-1][0] == "saved":
                out.cache.pop()
        elif (m := _OVERSIZE.search(line)):
            if out.cache and out.cache[-1][0] == "saved":
                n = out.cache.pop()[1]
                out.cache.append(("skipped", n, float(m.group(1))))
        elif _LOADED.search(line):
            out.cache.append(("loaded", -1, 0.0))
        elif (m := _EVICTED.search(line)):
            out.cache.append(("evicted", -1, float(m.group(1))))
        elif (m := _OBSOLETE.search(line)):
            out.cache.append(("removed", int(m.group(1)), 0.0))
        elif (m := _PURGED.search(line)):
            out.purged.append(int(m.group(1)))
        elif FULL_REPROCESS in line:
            out.full_reprocess = True
        else:
            f = parse_line(raw)
            if f is None:
                continue
            if f.kind == "created":
                out.created.append(f.values[4])
            elif f.kind == "erased":
                out.erased.append((f.values[0], f.values[3]))
            elif f.kind == "restored":
                out.restored = f.values[2]
            elif f.kind == "prompt_eval":
                out.prompt_n = f.values[1]
    return out
