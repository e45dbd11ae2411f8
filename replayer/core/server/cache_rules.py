"""Where the builds' slot and host-cache rules differ, read from each build's server source.

The rules themselves (slot selection, save/load, eviction, idle slots) are the same code in
every build from b9859 on (``docs/cache-rules.md`` cites them per build); what changed:

- **b9940** (``server_prompt_cache::alloc``): a state larger than the whole limit is not
  saved ("exceeds cache size limit, skipping"), and room is made *before* adding
  ("making room for prompt cache entry, removing oldest entry"); before, the entry was
  added and ``update()`` evicted from the front afterwards, keeping at least one.
- **b10865** (``server_slot::prompt_clear``): clearing a slot clears its checkpoint list
  too (``server_prompt::clear``); before, only the tokens went and the list stayed, to be
  erased as invalid at the slot's next task.

Builds between the sdists read are placed by the first sdist that shows a change: the
ranges are exact at the sdists named, a bound between two of them is not.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheRules", "rules_for"]

#: (first build with the change, the sdists it was read in)
_MAKE_ROOM = 9940  # absent in 9859, present in 9940, 9981, 10001, 10865
_CLEAR_DROPS_CHECKPOINTS = 10865  # absent in 9859 … 10001, present in 10865


@dataclass(frozen=True)
class CacheRules:
    build: int
    skip_oversize: bool  # alloc refuses a state larger than the limit
    make_room_first: bool  # alloc evicts the oldest entries before adding
    clear_drops_checkpoints: bool  # prompt_clear empties the checkpoint list
    checkpoints_survive_save: bool = True  # server_prompt carries its checkpoints into the cache and back


def rules_for(build: int) -> CacheRules:
    return CacheRules(build, build >= _MAKE_ROOM, build >= _MAKE_ROOM, build >= _CLEAR_DROPS_CHECKPOINTS)
