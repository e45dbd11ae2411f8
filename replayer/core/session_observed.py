"""Observed vs simulated in the report of a recorded session (a ``replayer record`` traffic log).

The log holds what the user's server did with every request (``cache_n``/``prompt_n`` from its
``timings`` or its endpoint's ``usage``, ``prompt_ms`` where the answer had timings, the slot):
that is the truth the replay is measured against. The report gets an ``observed`` section —
the server's totals, per request its numbers (with the turns), and per run on how many
requests its ``cache_n`` is the server's and where it is not — and the text and Markdown
reports show the same. A ``--log-prompts-dir`` folder has this side too when the same server's log is given
(``replay FOLDER --mode session --observed SERVER.LOG``): ``record.server_log`` reads each
completion task of the log (its slot, ``prompt_n`` and ``prompt_ms``, and with ``-lv 4`` its
``cache_n``, prompt size, batches and checkpoints), the *k*-th task is the folder's *k*-th prompt,
and the section has the same shape, with the log's batches and checkpoints per request.

An agent that records its server's counts per request (Cline: ``Message.recorded``, carried to
each turn as ``Turn.recorded``) gives the same section from its own file, marked
``kind: "agent"``: per turn the tokens the server reused and processed as the agent recorded
them, and per run on how many of those requests the prediction's ``cache_n`` and prompt size are
the recorded ones, with the re-processed totals side by side. The text and Markdown reports list
it per turn beside the prediction. Every other session's report is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.engine.slot_turns import SessionRun
from replayer.core.session.formats.prompt_log import FORMAT as PROMPT_LOG

SOURCE_FORMAT = "traffic-log"
PROMPT_FORMAT = PROMPT_LOG  # a --log-prompts-dir folder: observed only with its server's log
MAX_LISTED = 20  # differing requests named in the text report (30 in Markdown)


def observed_section(path: str | Path, fmt: str, runs: tuple[SessionRun, SessionRun],
                     turns: bool = True, server_log: str | Path | None = None,
                     recorded: list[tuple[Any, str | None]] | None = None) -> dict[str, Any] | None:
    """The report's ``observed`` section of a traffic log's replay, or of a prompt folder's with
    its server's log, or of a session whose agent recorded its requests' counts (``recorded``:
    each turn's ``RecordedTokens`` or None, and its thread); None for any other session."""
    if fmt == PROMPT_FORMAT and server_log is not None:
        return _from_server_log(Path(server_log), runs, turns)
    if fmt != SOURCE_FORMAT:
        return _from_agent(AGENT_NAMES.get(fmt, fmt), recorded, runs, turns) \
            if recorded and any(r is not None for r, _ in recorded) else None
    from replayer.core.session.formats.recorded_traffic import read_traffic

    obs = read_traffic(Path(path).expanduser()).observed
    return _section("the server's answers, as recorded by replayer record", obs, runs, turns)


def log_beside_folder(folder: str | Path) -> Path | None:
    """The server's log that sits with a ``--log-prompts-dir`` folder (``server_log.log_beside``):
    its observed side when none is given, for the CLI's ``replay FOLDER --mode session`` and for
    the app's ``replayer FOLDER`` alike. None when there is none; two is an ``ImportFailed``."""
    from replayer.core.record.server_log import log_beside
    from replayer.core.session.formats.prompt_log import NAME

    return log_beside(Path(folder), NAME.fullmatch)


def observed_of_log(server_log: str | Path) -> tuple[list[Any], Any]:
    """Each completion task of a server's log as an observed request (the traffic log's shape),
    and the log itself (its batches, checkpoints and warnings)."""
    from replayer.core.record.server_log import read_server_log
    from replayer.core.session.formats.recorded_traffic import Observed

    log = read_server_log(server_log)
    obs = [Observed(k, "/completion", None, 200, r.timings, r.slot, r.cache_n, r.prompt_n)
           for k, r in enumerate(log.requests)]
    return obs, log


def _from_server_log(server_log: Path, runs: tuple[SessionRun, SessionRun], turns: bool) -> dict[str, Any]:
    """The section of a prompt folder's replay: the log's tasks matched to the prompts in order."""
    obs, log = observed_of_log(server_log)
    n_prompts = max(len(sr.turns) for sr in runs)
    notes = list(log.warnings)
    if len(obs) != n_prompts:
        notes.append(f"the log holds {len(obs)} completion task(s) and the folder {n_prompts} prompt(s): "
                     f"the first {min(len(obs), n_prompts)} are matched in order")
    out = _section(f"the server's own log ({log.shape}), its tasks in order", obs[:n_prompts], runs, turns)
    out["notes"] = notes
    out["traced"] = log.traced
    if turns:
        for q, r in zip(out["requests"], log.requests):
            q.update(task=r.task, n_tokens=r.n_tokens, batches=len(r.batch_starts),
                     checkpoints_created=r.checkpoints_created, checkpoints_erased=r.checkpoints_erased,
                     restored=r.restored, full_reprocess=r.full_reprocess)
    return out


def _section(source: str, obs: list[Any], runs: tuple[SessionRun, SessionRun], turns: bool) -> dict[str, Any]:
    timed = [o.timings["prompt_ms"] for o in obs
             if o.timings and isinstance(o.timings.get("prompt_ms"), (int, float))]
    out: dict[str, Any] = {
        "source": source,
        "n_requests": len(obs),
        "cache_n": sum(o.cache_n or 0 for o in obs), "prompt_n": sum(o.prompt_n or 0 for o in obs),
        "prompt_ms": round(sum(timed), 3), "timed_requests": len(timed),
        "agreement": {sr.run: _agreement(obs, sr) for sr in runs},
    }
    if turns:
        out["requests"] = [{"turn": k, "seq": o.seq, "endpoint": o.endpoint, "thread": o.thread, "slot": o.id_slot,
                            "cache_n": o.cache_n, "prompt_n": o.prompt_n,
                            "prompt_ms": o.timings.get("prompt_ms") if o.timings else None}
                           for k, o in enumerate(obs)]
    return out


#: the agent a format's recorded counts are named by in the report
AGENT_NAMES = {"cline": "Cline"}


def _from_agent(agent: str, recorded: list[tuple[Any, str | None]], runs: tuple[SessionRun, SessionRun],
                turns: bool) -> dict[str, Any]:
    """The section of a session whose agent kept its server's counts: one entry a turn (None
    where the agent recorded nothing, as for the resume request, which was never sent)."""
    from replayer.core.session.formats.recorded_traffic import Observed

    obs = [Observed(k, "", thread, None, None, None, r.reused if r else None, r.prompt - r.reused if r else None)
           for k, (r, thread) in enumerate(recorded)]
    had = [o for o in obs if o.cache_n is not None]
    sources = sorted({r.source for r, _ in recorded if r is not None and r.source})
    out: dict[str, Any] = {
        "source": f"{agent}'s own counts of each request, as its server reported them", "kind": "agent",
        "agent": agent, "n_requests": len(had), "n_turns": len(obs),
        "cache_n": sum(o.cache_n or 0 for o in had), "prompt_n": sum(o.prompt_n or 0 for o in had),
        "prompt_ms": 0.0, "timed_requests": 0, "notes": [f"read from {x}" for x in sources],
        "agreement": {},
    }
    for sr in runs:
        ag = _agreement(obs, sr)
        # the re-processed tokens of the compared requests, the prediction's beside the recorded
        done = [t for t in sr.turns if t.turn < len(obs) and not t.error and obs[t.turn].cache_n is not None]
        ag["prompt_n"] = sum(t.prompt_n for t in done)
        ag["observed_prompt_n"] = sum(obs[t.turn].prompt_n or 0 for t in done)
        out["agreement"][sr.run] = ag
    if turns:
        out["requests"] = [{"turn": o.seq, "thread": o.thread, "cache_n": o.cache_n, "prompt_n": o.prompt_n,
                            "output": r.output, "cache_written": r.cache_written}
                           for o, (r, _) in zip(obs, recorded) if r is not None]
    return out


def _agreement(obs: list, sr: SessionRun) -> dict[str, Any]:
    """On how many requests the run's ``cache_n`` is the server's, and the ones where not."""
    differ = []
    compared = same_prompt = 0
    timed_ms = [0.0, 0.0]  # the server's and the run's prompt time, on the requests the server timed
    for t in sr.turns:
        if t.turn >= len(obs) or t.error:
            continue
        o = obs[t.turn]
        if o.timings and isinstance(o.timings.get("prompt_ms"), (int, float)):
            timed_ms[0] += o.timings["prompt_ms"]
            timed_ms[1] += t.prompt_ms
        if o.cache_n is None:
            continue
        compared += 1
        same_prompt += o.prompt_n is not None and o.cache_n + o.prompt_n == t.cache_n + t.prompt_n
        if t.cache_n != o.cache_n:
            differ.append({"turn": t.turn, "observed_cache_n": o.cache_n, "observed_prompt_n": o.prompt_n,
                           "cache_n": t.cache_n, "prompt_n": t.prompt_n})
    return {"label": sr.label, "compared": compared, "same_cache_n": compared - len(differ),
            "same_prompt_tokens": same_prompt, "timed_observed_ms": round(timed_ms[0], 3),
            "timed_simulated_ms": round(timed_ms[1], 3), "differ": differ}


def _server_line(o: dict[str, Any]) -> str:
    if o.get("kind") == "agent":
        return (f"recorded by {o['agent']} (its server's counts, per request): reused {o['cache_n']:,}, processed "
                f"{o['prompt_n']:,} tokens on the {o['n_requests']} of {o['n_turns']} turns it recorded")
    timed = "" if o["timed_requests"] == o["n_requests"] else f" ({o['timed_requests']} of {o['n_requests']} timed)"
    what = "as its log says" if o["source"].startswith("the server's own log") else "as recorded"
    return (f"observed (the server, {what}): reused {o['cache_n']:,}, processed {o['prompt_n']:,} tokens in "
            f"{o['prompt_ms'] / 1000:.2f} s{timed}")


def _times(o: dict[str, Any], ag: dict[str, Any]) -> str:
    """The run's prompt time beside the server's, on the requests the server timed."""
    return (f"{ag['timed_simulated_ms'] / 1000:.2f} s of prompt time on the {o['timed_requests']} timed "
            f"requests (server {ag['timed_observed_ms'] / 1000:.2f} s)")


def _agent_line(o: dict[str, Any], ag: dict[str, Any]) -> str:
    """How a run's prediction compares with what the agent recorded, on the requests it recorded."""
    d = ag["prompt_n"] - ag["observed_prompt_n"]
    return (f"{ag['label']}: reused as {o['agent']} recorded on {ag['same_cache_n']}/{ag['compared']} requests "
            f"(prompt tokens as counted on {ag['same_prompt_tokens']}); re-processed {ag['prompt_n']:,} tokens "
            f"where {o['agent']} recorded {ag['observed_prompt_n']:,} "
            f"({'as many' if not d else f'{abs(d):,} ' + ('more' if d > 0 else 'fewer')})")


def turn_rows(o: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """The agent's recorded counts by turn (for the per-turn lists); empty for other sections."""
    if not o or o.get("kind") != "agent":
        return {}
    return {q["turn"]: q for q in o.get("requests", ())}


def _differ_line(d: dict[str, Any]) -> str:
    return (f"turn {d['turn']}: server reused {d['observed_cache_n']:,} of "
            f"{d['observed_cache_n'] + (d['observed_prompt_n'] or 0):,}, simulated {d['cache_n']:,} of "
            f"{d['cache_n'] + d['prompt_n']:,}")


def text_lines(doc: dict[str, Any]) -> list[str]:
    o = doc.get("observed")
    if not o:
        return []
    lines = [_server_line(o)] + [f"  note: {n}" for n in o.get("notes", [])]
    if o.get("kind") == "agent":
        return lines + _agent_text(doc, o)
    for ag in o["agreement"].values():
        lines.append(f"  {ag['label']}: cache_n as the server's on {ag['same_cache_n']}/{ag['compared']} requests "
                     f"(prompt tokens as it counted on {ag['same_prompt_tokens']}); {_times(o, ag)}")
        lines += ["    " + _differ_line(d) for d in ag["differ"][:MAX_LISTED]]
    return lines


def _agent_text(doc: dict[str, Any], o: dict[str, Any]) -> list[str]:
    """Each run against the agent's counts, then the first turns side by side."""
    lines = [f"  {_agent_line(o, ag)}" for ag in o["agreement"].values()]
    rows = turn_rows(o)
    if not rows or not all("turns" in r for r in doc.get("runs", ())):
        return lines
    by_turn = [{t["turn"]: t for t in r["turns"]} for r in doc["runs"]]
    lines.append(f"  per turn, reused of the prompt: {o['agent']} / " + " / ".join(r["label"] for r in doc["runs"]))
    for k, q in list(rows.items())[:MAX_LISTED]:
        sims = [bt.get(k) for bt in by_turn]
        sim = " / ".join(f"{t['cache_n']:,} of {t['cache_n'] + t['prompt_n']:,}" if t else "—" for t in sims)
        lines.append(f"    turn {k}: {q['cache_n']:,} of {q['cache_n'] + q['prompt_n']:,} / {sim}")
    if len(rows) > MAX_LISTED:
        lines.append(f"    … {len(rows) - MAX_LISTED} more turns (--json, --markdown)")
    return lines


def markdown_lines(doc: dict[str, Any]) -> list[str]:
    o = doc.get("observed")
    if not o:
        return []
    if o.get("kind") == "agent":  # its per-turn counts are columns of the per-turn table
        return ["", f"**Recorded by {o['agent']} vs simulated** — {_server_line(o)}", "",
                *(f"- {n}" for n in o.get("notes", [])), *(f"- {_agent_line(o, ag)}" for ag in o["agreement"].values())]
    out = ["", f"**Observed vs simulated** — {_server_line(o)}", "",
           "| run | cache_n as the server's | prompt tokens as it counted | prompt time on the timed requests "
           "(server's) | requests that differ |",
           "|---|---:|---:|---:|---|"]
    if o.get("notes"):
        out[2:2] = ["", *(f"- {n}" for n in o["notes"])]
    for ag in o["agreement"].values():
        listed = ", ".join(str(d["turn"]) for d in ag["differ"][:30]) + (" …" if len(ag["differ"]) > 30 else "")
        out.append(f"| {ag['label']} | {ag['same_cache_n']}/{ag['compared']} | "
                   f"{ag['same_prompt_tokens']}/{ag['compared']} | {ag['timed_simulated_ms'] / 1000:.2f} s "
                   f"({ag['timed_observed_ms'] / 1000:.2f} s) | {listed or '—'} |")
    for ag in o["agreement"].values():
        if ag["differ"]:
            out += ["", f"**{ag['label']}** differs from the server:", ""]
            out += [f"- {_differ_line(d)}" for d in ag["differ"][:30]]
    return out
