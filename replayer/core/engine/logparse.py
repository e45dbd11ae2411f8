"""llama-server log lines → facts about the prefill (spec §10).

Accepts both function-tag variants (``update_slots`` ≤ b9745, ``  operator()`` ≥ b9754),
router-mode ``[port]`` prefixes, ANSI colours, missing timestamps (``--no-log-prefix``)
and the older ``n_tokens = S, memory_seq_rm`` batch line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the line a server logs when it re-processes the whole prompt (no usable cache or checkpoint)
FULL_REPROCESS = "forcing full prompt re-processing"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^(?:\[\s*(?P<port>\d+)\]\s+)?(?:(?P<ts>\d+\.\d{2}\.\d{3}\.\d{3})\s+)?(?:(?P<lvl>[IWEDT])\s+)?(?P<msg>.*)$")
_SLOT = re.compile(r"^slot\s+(?P<tag>.{1,12}?):\s+id\s+(?P<id>-?\d+)\s+\|\s+task\s+(?P<task>-?\d+)\s+\|\s+(?P<text>.*)$")
_SRV = re.compile(r"^srv\s+(?P<tag>.{1,12}?):\s+(?P<text>.*)$")

_CACHED = re.compile(r"^(?:cached )?n_tokens = (\d+), memory_seq_rm \[(\d+), end\)")
_NEW_PROMPT = re.compile(r"new prompt, n_ctx_slot = (\d+), n_keep = (\d+), task\.n_tokens = (\d+)")
_CKPT_FIELDS = r"pos_min = (-?\d+), pos_max = (-?\d+), n_tokens = (\d+)"
_CREATED = re.compile(r"created context checkpoint (\d+) of (\d+) \(" + _CKPT_FIELDS + r", size = ([\d.]+) MiB\)")
_ERASE_OLD = re.compile(r"erasing old context checkpoint \(" + _CKPT_FIELDS + r", size = ([\d.]+) MiB\)")
_ERASE_CLOSE = re.compile(r"erasing context checkpoint too close to an earlier one \(" + _CKPT_FIELDS)
_SUPERSEDE = re.compile(r"superseding context checkpoint at n_tokens = (\d+)")
_RESTORED = re.compile(r"restored context checkpoint \(" + _CKPT_FIELDS + r", n_past = (\d+)")
_INVALID = re.compile(r"erased invalidated context checkpoint \(" + _CKPT_FIELDS)
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_PROGRESS = re.compile(r"prompt processing, n_tokens =\s*(\d+), progress = ([\d.]+)")


@dataclass(frozen=True)
class LogFact:
    kind: str  # batch_start | new_prompt | created | erased | restored | prompt_eval | progress
    task: int | None
    ts_ms: float | None  # since process start, when the line has a timestamp
    values: tuple
    port: int | None = None


def parse_ts(ts: str) -> float:
    m, s, ms, us = ts.split(".")
    return (int(m) * 60 + int(s)) * 1000.0 + int(ms) + int(us) / 1000.0


def strip_colour(line: str) -> str:
    """The line without the ANSI colour codes a terminal-attached server writes."""
    return _ANSI.sub("", line)


def parse_line(line: str) -> LogFact | None:
    line = strip_colour(line).rstrip("\r\n")
    m = _PREFIX.match(line)
    if not m:
        return None
    msg = m.group("msg")
    ts = parse_ts(m.group("ts")) if m.group("ts") else None
    port = int(m.group("port")) if m.group("port") else None
    task: int | None = None
    sm = _SLOT.match(msg)
    if sm:
        task = int(sm.group("task"))
        text = sm.group("text")
    else:
        vm = _SRV.match(msg)
        text = vm.group("text") if vm else msg

    def fact(kind: str, *values) -> LogFact:
        return LogFact(kind, task, ts, tuple(values), port)

    if (x := _CACHED.search(text)):
        return fact("batch_start", int(x.group(1)))
    if (x := _CREATED.search(text)):
        return fact("created", int(x.group(1)), int(x.group(2)), int(x.group(3)), int(x.group(4)),
                    int(x.group(5)), float(x.group(6)))
    if (x := _ERASE_OLD.search(text)):
        return fact("erased", "old", int(x.group(1)), int(x.group(2)), int(x.group(3)))
    if (x := _ERASE_CLOSE.search(text)):
        return fact("erased", "too_close", int(x.group(1)), int(x.group(2)), int(x.group(3)))
    if (x := _INVALID.search(text)):
        return fact("erased", "invalidated", int(x.group(1)), int(x.group(2)), int(x.group(3)))
    if (x := _SUPERSEDE.search(text)):
        return fact("erased", "superseded", -1, -1, int(x.group(1)))
    if (x := _RESTORED.search(text)):
        return fact("restored", int(x.group(1)), int(x.group(2)), int(x.group(3)), int(x.group(4)))
    if (x := _NEW_PROMPT.search(text)):
        return fact("new_prompt", int(x.group(3)))
    if (x := _PROMPT_EVAL.search(text)):
        return fact("prompt_eval", float(x.group(1)), int(x.group(2)))
    if (x := _PROGRESS.search(text)):
        return fact("progress", int(x.group(1)), float(x.group(2)))
    return None


_N_SWA = re.compile(r"print_info: n_swa\s*=\s*(\d+)")


def memory_kind(lines) -> tuple[str | None, int | None]:
    """(memory kind, sliding window) from a server's start-up log at ``-lv 4``: what the
    model's memory is, whatever the user's preset says.

    ``llama_memory_recurrent`` is created for recurrent and hybrid models; ``n_swa > 0``
    means a sliding-window cache; a bare ``llama_kv_cache`` is plain attention.
    """
    recurrent = kv = False
    n_swa = None
    for line in lines:
        if "llama_memory_recurrent" in line:
            recurrent = True
        elif "llama_kv_cache" in line:
            kv = True
        elif (m := _N_SWA.search(line)):
            n_swa = int(m.group(1))
    if recurrent:
        return "recurrent", None
    if n_swa:
        return "swa", n_swa
    if kv:
        return "plain", None
    return None, None
