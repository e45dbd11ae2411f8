"""``advise --mode session``: the changes that make a whole agent session faster, turn by turn.

``advise`` ranks changes by pricing each with an ``Evaluator``; the resume evaluator simulates
one cold prefill. This one replays every turn of the session on one simulated slot
(``session_replay``), so it also prices what only matters across turns: the checkpoint flags
(``--ctx-checkpoints``, ``--checkpoint-min-step``) decide whether an edited turn can restore a
checkpoint or re-processes everything, and the client-side switches (a system prompt kept fixed,
reasoning kept in the history) remove misses altogether. The time of a setting is the modelled
prompt time summed over all turns; the ranking is ``advise``'s own.

``--cache-ram`` is priced too, but the simulated slot holds one conversation whose next request
always finds its own previous prompt in the slot: the RAM prompt cache would only help if
another conversation had taken the slot, which a session file does not record. Its row says so.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

from replayer.core import advise
from replayer.core.advise import Advice, Outcome, Settings
from replayer.core.errors import ReplayerError
from replayer.core.session.turns import SessionTurns
from replayer.core.what_ifs import WHAT_IFS

CACHE_RAM_NOTE = ("not modelled: the simulated slot always holds this conversation's previous prompt; "
                  "the RAM prompt cache only helps when another conversation took the slot")


@dataclass(frozen=True)
class SessionSettings(Settings):
    """``Settings`` plus the client-side switches a session replay can apply (``what_ifs``:
    advise's client rows set them)."""

    freeze_system: bool = False
    keep_reasoning: bool = False


def session_settings(s: Settings) -> SessionSettings:
    if isinstance(s, SessionSettings):
        return s
    return SessionSettings(**{f.name: getattr(s, f.name) for f in dataclasses.fields(Settings)})


class SessionEvaluator:
    """Prices a setting by replaying every turn of the session on one simulated slot."""

    mode = "session"

    def __init__(self, path: str | Path, turns: SessionTurns | None = None) -> None:
        self.path = str(path)
        self.turns = turns
        self._prepared: dict[tuple, object] = {}

    def _prep(self, s: SessionSettings, cfg):
        from replayer.core import session_replay as sr

        if self.turns is None:
            self.turns = sr.load_turns(self.path, cfg.format, system_prompt=cfg.system_prompt, tools=cfg.tools,
                                       images=cfg.images)
        key = (cfg.a, s.freeze_system, s.keep_reasoning)  # what the turn prompts depend on among the variants
        if key not in self._prepared:
            self._prepared[key] = sr.prepare_session(self.path, cfg, turns=self.turns, freeze_system=s.freeze_system,
                                                     keep_reasoning=s.keep_reasoning)
        return self._prepared[key]

    def evaluate(self, s: Settings) -> Outcome:
        from replayer.core import session_replay as sr

        s = session_settings(s)
        cfg = dataclasses.replace(s.simulated_config(), b=s.config.a)
        n_ctx = s.slot_cells()
        base = self._prep(s, cfg)
        prep = dataclasses.replace(base, config=cfg, n_ctx=n_ctx, layouts={"A": base.layouts["A"]})
        run = sr.simulated_session_run(prep, "A")
        full = [t for t in run.turns if t.error]
        if full:
            return Outcome(float("inf"), 0, 0, f"turn {full[0].turn} does not fit a slot's {n_ctx:,} cells "
                                                f"(-c {s.ctx_size} / -np {s.n_parallel})")
        return Outcome(run.prompt_ms, run.n_batches, run.n_checkpoints)


def server_fixes(path: str | Path, settings: Settings, server_args: str, turns: SessionTurns | None = None
                 ) -> dict:
    """The user's own server (``--server-args``): today's modelled prompt time through its slots,
    host cache, sleep and router unloads (``server.session``), and each flag that the report's
    "why" names as the one that would have kept a lost state (``-np``, ``--cache-ram``,
    ``--sleep-idle-seconds``, ``--models-max``) priced by the same simulation with it added."""
    from replayer.core import session_replay as sr
    from replayer.core.server.session import check_server_args, fix_flags, server_why

    s = session_settings(settings)
    cfg = dataclasses.replace(s.simulated_config(), b=s.config.a)
    text = check_server_args(server_args, cfg)
    prep = sr.prepare_session(path, cfg, turns=turns, n_ctx=s.ctx_size)
    prep.server_args = text
    today = sr.simulated_session_run(prep, "A")
    why = server_why(text, sr.run_spec("A", cfg), prep.layouts["A"].prompts, cfg.model, prep.n_ctx)
    rows = []
    for flag, (value, n) in fix_flags(why).items():
        args = _with_flag(text, flag, value)
        prep.server_args = args
        try:
            run = sr.simulated_session_run(prep, "A")
        except ReplayerError:  # a flag this build does not take
            continue
        saving = today.prompt_ms - run.prompt_ms
        rows.append({"flag": f"{flag} {value}", "requests": n, "prompt_ms": round(run.prompt_ms, 1),
                     "prompt_n": run.prompt_n, "saving_ms": round(saving, 1),
                     "saving_pct": round(100 * saving / today.prompt_ms, 1) if today.prompt_ms else None,
                     "command": f"llama-server {args}",
                     "replayer_command": "replayer " + shlex.join(
                         ["replay", str(path), "--mode", "session", "--server-args", args,
                          "--a", str(s.config.a), "--b", str(s.config.a), "--model", s.config.model, "--json"])})
    rows.sort(key=lambda r: r["prompt_ms"])
    return {"server_args": text, "prompt_ms": round(today.prompt_ms, 1), "prompt_n": today.prompt_n,
            "lost": sum(w["lost_tokens"] for w in why if w.get("cause")), "fixes": rows}


def _with_flag(text: str, flag: str, value: int) -> str:
    """The command line with ``flag value`` instead of any value it gave that flag."""
    argv = shlex.split(text)
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return shlex.join([*out, flag, str(value)])


def advise_session(path: str | Path, settings: Settings, turns: SessionTurns | None = None,
                   server_args: str | None = None) -> Advice:
    """``advise`` over every turn of the session; client rows say what to change in the agent.
    ``server_args``: the user's own command line, whose lost states' flags are priced too
    (``server_fixes``)."""
    s = session_settings(settings)
    adv = advise.advise(path, s, evaluator=SessionEvaluator(path, turns))
    if server_args is not None:
        adv.server = server_fixes(path, s, server_args, turns)
    by_title = {w.title: w for w in WHAT_IFS}
    for r in adv.recommendations:
        if r["side"] == "client" and r["title"] in by_title:
            w = by_title[r["title"]]
            r["command"] = w.change
            r["flags"] = []
            r["replayer_command"] = "replayer " + shlex.join(["replay", str(path), "--mode", "session", w.flag,
                                                              "--a", str(s.config.a), "--b", str(s.config.a),
                                                              "--model", s.config.model, "--json"])
    for n in adv.no_effect:
        if n["kind"] == "cache-ram" and n["reason"].startswith("no change"):
            n["reason"] = CACHE_RAM_NOTE
    return adv
