"""``replay --mode session``: every turn of a session on builds A and B, with the cache reused or lost.

The resume mode asks how one cold prefill of the whole conversation is batched. This mode
asks the question users bring from long agent sessions: turn after turn, what did the
server reuse, what did it re-process, and why. It takes the same ``ReplayConfig``; the turns
come from ``session.turns``, their prompts from ``prompt.turn_layouts``, the simulated slot
from ``engine.slot_turns`` and the reasons from ``misses``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from replayer import __version__
from replayer.core.engine.slot_turns import SessionRun, TurnReader, simulate_session, simulate_session_records
from replayer.core.misses import explain, lost_by_cause
from replayer.core.errors import ReplayerError
from replayer.core.hardware.cost import CostModel
from replayer.core.prompt import kept_reasoning
from replayer.core.prompt.turn_layouts import TurnLayouts, turn_layouts
from replayer.core.prepare import span_rule
from replayer.core.replay import ReplayConfig, run_spec
from replayer.core.runspec import DEFAULT_SESSION_CTX
from replayer.core.session.turns import MAIN, SessionTurns, freeze_system_prompt, load_turns, thread_of
from replayer.core.session_observed import markdown_lines as observed_markdown, observed_section
from replayer.core.session_observed import text_lines as observed_text
from replayer.core.session_observed import turn_rows as observed_rows
from replayer.core.words import counted

__all__ = ["MODES", "SessionPrepared", "load_turns", "prepare_session", "report", "session_run",
           "session_events", "simulated_session_events", "simulated_session_run", "to_markdown", "to_text"]

MODES = ("resume", "session")


@dataclass
class SessionPrepared:
    config: ReplayConfig
    turns: SessionTurns
    layouts: dict[str, TurnLayouts] = field(default_factory=dict)
    n_ctx: int | None = None
    what_if: list[str] = field(default_factory=list)
    server_args: str | None = None  # the user's llama-server command line (``server.session``)
    # per run: the turns before which the server slept or a router unloaded the model (``misses``)
    restarts: dict[str, dict[int, tuple[str, str]]] = field(default_factory=dict)
    _cost: CostModel | None = field(default=None, init=False, repr=False, compare=False)
    # ``requests_of`` of each layout's prompts, by the layout's identity: builds A and B of one span
    # rule share a layout, and building 1,200 requests was ~3 % of a run through a server setup
    _requests: dict[int, tuple[TurnLayouts, list]] = field(default_factory=dict, init=False, repr=False,
                                                           compare=False)

    def cost(self) -> CostModel:
        """The config's cost model, one for both runs and every replay of this session: its price
        memo (``cost.price_memo``) then serves build B the batches build A priced."""
        if self._cost is None:
            self._cost = self.config.cost()
        return self._cost

    def meta(self) -> dict[str, Any]:
        s = self.turns.session
        return {"session": s.path, "format": s.format, "turns": len(self.turns.turns),
                "turns_exact": self.turns.exact, "what_if": self.what_if,
                "incomplete": s.incomplete,
                "notes": s.notes + self.turns.notes + self.turns.request.notes
                + [f for lay in {id(v): v for v in self.layouts.values()}.values() for f in lay.fallbacks]}


def prepare_session(path: str | Path, config: ReplayConfig, *, freeze_system: bool = False,
                    n_ctx: int | None = None, turns: SessionTurns | None = None,
                    keep_reasoning: bool = False) -> SessionPrepared:
    """Import (unless ``turns`` is given) and lay out every turn once per span rule.

    ``freeze_system`` and ``keep_reasoning`` are the client-side what-ifs: the first changes
    the requests (every turn keeps the first system prompt), the second the prompts (each
    message stays as it was first rendered, ``prompt.kept_reasoning``)."""
    if keep_reasoning and config.engine == "live":
        raise ReplayerError("--keep-reasoning is simulated only: a real server renders the history with its own "
                            "template, so it cannot be made to keep what that template drops")
    st = turns or load_turns(path, config.format, system_prompt=config.system_prompt, tools=config.tools,
                             images=config.images)
    what_if = []
    if freeze_system:
        st = dataclasses.replace(st, turns=freeze_system_prompt(st.turns))
        what_if.append("freeze-system-prompt")
    if keep_reasoning:
        what_if.append("keep-reasoning")
    prep = SessionPrepared(config, st, n_ctx=n_ctx, what_if=what_if)
    tpl = config.template_obj()
    cache: dict[tuple, TurnLayouts] = {}
    for run, build in zip(("A", "B"), config.builds()):
        key = span_rule(build, tpl)
        if key not in cache:
            lay = turn_layouts(st.turns, template=tpl, tokenizer=config.tokenizer_eff, build=build)
            if keep_reasoning:
                lay, changed = kept_reasoning.keep_reasoning(lay, build)
                note = (f"keep-reasoning: {changed} of {len(lay.prompts)} turn prompts keep text the template "
                        "dropped" if changed else "keep-reasoning: the template never changed text it had sent; "
                        "the prompts are the real ones")
                if note not in lay.fallbacks:
                    lay.fallbacks.append(note)
            cache[key] = lay
        prep.layouts[run] = cache[key]
    return prep


def _server_turns(prep: SessionPrepared, spec) -> Iterator | None:
    """The turns through the user's server setup (slots, host cache), or None: one slot."""
    if prep.server_args is None:
        return None
    from replayer.core.server.session import server_slot_turns
    from replayer.core.server.traffic import requests_of

    lay = prep.layouts[spec.run]
    kept = prep._requests.get(id(lay))
    if kept is None or kept[0] is not lay:
        kept = prep._requests[id(lay)] = (lay, requests_of(lay.prompts))
    return server_slot_turns(prep.server_args, spec, lay.prompts, prep.config.model, prep.n_ctx,
                             prep.restarts.setdefault(spec.run, {}), requests=kept[1])


def simulated_session_events(prep: SessionPrepared, run: str) -> Iterator[Any]:
    spec = run_spec(run, prep.config)
    yield from simulate_session(spec, prep.layouts[run].prompts, prep.cost(), n_ctx=prep.n_ctx,
                                turns=_server_turns(prep, spec))


def simulated_session_run(prep: SessionPrepared, run: str) -> SessionRun:
    """``session_run(prep, run, simulated_session_events(prep, run))`` for a reader that needs the
    per-turn facts, not the stream: the same records, without the events only a stream shows."""
    spec = run_spec(run, prep.config)
    return _explained(prep, run, simulate_session_records(spec, prep.layouts[run].prompts, prep.cost(),
                                                          n_ctx=prep.n_ctx, turns=_server_turns(prep, spec)))


def session_events(prep: SessionPrepared, run: str) -> Iterator[Any]:
    """One run's events on the config's engine: the one place the CLI and the app choose it."""
    cfg = prep.config
    if cfg.engine == "live":
        from replayer.core.engine.live_session import live_session_events  # httpx: only for live runs

        return live_session_events(prep, run, Path(cfg.model).expanduser(), backend=cfg.backend or "cpu",
                                   ctx_size=cfg.ctx_size or DEFAULT_SESSION_CTX, request_timeout=cfg.timeout,
                                   server_args=prep.server_args, threads=cfg.threads)
    return simulated_session_events(prep, run)


def session_run(prep: SessionPrepared, run: str, events) -> SessionRun:
    """Per-turn facts of one run with every miss explained."""
    return SessionFacts(prep, run).feed(events)


class SessionFacts:
    """``session_run`` of a run whose events are still coming, kept up to date part by part:
    the app's panes read the facts at every repaint, and reading every event so far again made
    a long session's replay quadratic in the UI thread. Feed only finished turns' events."""

    def __init__(self, prep: SessionPrepared, run: str) -> None:
        self.prep = prep
        self.reader = TurnReader(run)
        self.explained = 0  # turns explained so far

    def feed(self, events) -> SessionRun:
        sr = _explained(self.prep, self.reader.run, self.reader.feed(events), start=self.explained)
        self.explained = len(sr.turns)
        return sr


def _explained(prep: SessionPrepared, run: str, sr: SessionRun, start: int = 0) -> SessionRun:
    lay = prep.layouts[run]
    explain(sr, lay.prompts, lay.delimiters, start=start, restarts=prep.restarts.get(run))
    return sr


# -- reports -----------------------------------------------------------------------------

def run_dict(sr: SessionRun, turns: bool = True) -> dict[str, Any]:
    """A run's report entry; without ``turns`` (the app's verdict: every turn's dict is ~20 µs,
    a 2,000-message session's report ~50 ms of the UI thread) only its totals."""
    misses = [t for t in sr.turns if t.cause]
    return {
        "run": sr.run, "label": sr.label, "build": sr.build, "generation": sr.generation, "engine": sr.engine,
        "error": sr.failed, "n_turns": len(sr.turns), "cache_n": sr.cache_n, "prompt_n": sr.prompt_n,
        "prompt_ms": round(sr.prompt_ms, 3), "n_batches": sr.n_batches, "n_checkpoints": sr.n_checkpoints,
        "full_reprocess_turns": [t.turn for t in sr.turns if t.full_reprocess],
        "misses": [t.turn for t in misses], "lost_by_cause": lost_by_cause(sr),
        **({"turns": [t.to_dict() for t in sr.turns]} if turns else {}),
    }


def verdict(a: SessionRun, b: SessionRun) -> str:
    if a.failed or b.failed:
        return "a run failed: " + (a.failed or b.failed or "")
    faster, slower = (b, a) if b.prompt_ms <= a.prompt_ms else (a, b)
    d_tok = slower.prompt_n - faster.prompt_n
    tokens = (f"re-processed {abs(d_tok):,} {'fewer' if d_tok > 0 else 'more'} tokens" if d_tok
              else "re-processed as many tokens")
    text = (f"over {counted(len(b.turns), 'turn')} {faster.build} {tokens} and spent "
            f"{(slower.prompt_ms - faster.prompt_ms) / 1000:.2f} s less in prompt processing than {slower.build}")
    causes = lost_by_cause(slower)
    if causes:
        worst = max(causes.items(), key=lambda kv: kv[1]["ms"])
        text += (f"; {slower.build} lost {worst[1]['ms'] / 1000:.2f} s to {worst[0]} "
                 f"({int(worst[1]['turns'])} turn{'s' if worst[1]['turns'] != 1 else ''})")
    return text


def report(prep: SessionPrepared, a: SessionRun, b: SessionRun, turns: bool = True) -> dict[str, Any]:
    runs = [run_dict(a, turns), run_dict(b, turns)]
    if turns:  # which thread each request was (main, a subagent, a side request): what a switch is between
        threads = turn_threads(prep)
        for r in runs:
            for t in r["turns"]:
                t["thread"] = threads[t["turn"]] if t["turn"] < len(threads) else MAIN
    if turns and prep.server_args is not None:  # why each thread kept or lost its cache (server.why)
        from replayer.core.server.session import price_fixes, server_why

        # a live run's why is the simulated server's on the prompts that server laid out; the
        # simulation reads the model's memory kind from its GGUF (the live config assumes checkpoints)
        cfg = dataclasses.replace(prep.config, engine="simulated") if prep.config.engine == "live" else prep.config
        for r, run in zip(runs, ("A", "B")):
            r["why"] = server_why(prep.server_args, run_spec(run, cfg), prep.layouts[run].prompts, cfg.model,
                                  prep.n_ctx)
            # the flags that would have kept the lost states, priced by the same simulation
            r["fixes"] = price_fixes(prep.server_args, run_spec(run, cfg), prep.layouts[run].prompts, cfg.model,
                                     prep.n_ctx, r["why"])
    caveat = prep.turns.session.incomplete  # a verdict on part of the session says so
    doc = {"mode": "session", "session": prep.meta(),
           "verdict": verdict(a, b) + (f" (warning: {caveat})" if caveat else ""), "runs": runs}
    observed = observed_section(prep.turns.session.path, prep.turns.session.format, (a, b), turns,
                                server_log=prep.config.observed,
                                recorded=[(t.recorded, thread_of(t)) for t in prep.turns.turns])
    # a traffic log, a prompt folder's server log, an agent's own counts: what the server did, beside both runs
    if observed is not None:
        doc["observed"] = observed
    return doc


SESSION_FORMATS = ("json", "md", "text")


def session_report(doc: dict[str, Any], runs: tuple[SessionRun, SessionRun], fmt: str) -> bytes:
    """A finished session replay as the CLI prints it and the app exports it: one document per
    format, through ``core/export.py`` (redacted like every other report)."""
    from replayer.core import export

    if fmt == "json":
        return export.doc_json(doc)
    if fmt in ("md", "markdown"):
        return export.redacted(to_markdown(doc, runs))
    if fmt == "text":
        return export.redacted(to_text(doc, runs))
    raise ValueError(f"unknown session report format {fmt!r}; known: {', '.join(SESSION_FORMATS)}")


def miss_line(t) -> str:
    c = t.cause
    line = f"turn {t.turn}: {c['cause']}, {c['lost_tokens']:,} tokens re-processed ({c['lost_ms']:.1f} ms)"
    if c.get("where"):
        line += f" — {c['where']}: `{c['old_text'].strip()[:70]}` → `{c['new_text'].strip()[:70]}`"
    if c.get("checkpoint"):
        line += f" [{c['checkpoint']}]"
    if c["cause"] in ("thread_switch", "server_slept", "model_unloaded"):
        line += f" — {c['detail']}"
    return line


def _why_lines(r: dict[str, Any]) -> list[str]:
    """The ``why`` of a run with a server setup: a line per thread, then each request that came
    back to its thread after another thread ran (where its state was found, or what took it)."""
    why = r.get("why")
    if not why:
        return []
    per: dict[str, list[dict]] = {}
    for w in why:
        per.setdefault(w["thread"], []).append(w)
    lines = [f"thread {th}: {len(ws) + 1} requests, {sum(w['lost_tokens'] for w in ws):,} shared tokens "
             f"re-processed" for th, ws in per.items()]
    for w in why:
        if w.get("cause") or w["kept"] == "host cache":
            line = (f"request {w['request']} ({w['thread']}, slot {w['slot']}): "
                    + (f"kept in the {w['kept']}" if w["kept"] == "host cache" else
                       f"kept in {w['kept']}" if w["kept"] else "nothing kept"))
            if w.get("cause"):
                line += f"; lost {w['lost_tokens']:,} tokens: {w['cause']}"
                line += f" (would keep it: {w['fix']})" if w.get("fix") else ""
            lines.append(line)
    for fx in r.get("fixes") or ():
        lines.append(f"with {fx['flag']}: {fx['prompt_n_with']:,} tokens processed instead of {fx['prompt_n']:,} "
                     f"({fx['saved_tokens']:,} fewer; {fx['requests']} request(s) lost their state without it)")
    return lines


def to_text(doc: dict[str, Any], runs: tuple[SessionRun, SessionRun]) -> str:
    lines = [f"session replay: {counted(doc['session']['turns'], 'turn')}"
             + (f" (what-if: {', '.join(doc['session']['what_if'])})" if doc["session"]["what_if"] else "")]
    for r, sr in zip(doc["runs"], runs):
        lines.append(f"{r['label']}: reused {r['cache_n']:,}, processed {r['prompt_n']:,} tokens in "
                     f"{r['prompt_ms'] / 1000:.2f} s, {r['n_batches']} batches, {r['n_checkpoints']} checkpoints, "
                     f"{len(r['misses'])} misses")
        lines += ["  " + miss_line(t) for t in sr.turns if t.cause][:20]
        lines += ["  " + line for line in _why_lines(r)[:20]]
    lines += observed_text(doc)
    lines.append(doc["verdict"])
    lines += [f"note: {n}" for n in doc["session"]["notes"]]
    return "\n".join(lines)


MD_TURN_ROWS = 500  # the per-turn table of a longer session stops here (the JSON has every turn)


def _md_header(doc: dict[str, Any], runs: tuple[SessionRun, SessionRun]) -> list[str]:
    """The header block of the resume export (``export.to_markdown``): what was replayed, how,
    by which builds, and whether each run completed, so the document serves as a bug report."""
    a, b = runs
    sess = doc["session"]
    settings = a.settings or b.settings
    return [
        f"## Session replay: {a.build} vs {b.build}", "",
        f"**{doc['verdict']}**", "",
        *([f"> **Warning:** {sess['incomplete']}", ""] if sess.get("incomplete") else []),
        f"- session: `{sess['session']}` ({sess['format']}, {counted(sess['turns'], 'turn')}"
        f"{'' if sess.get('turns_exact', True) else ', turn boundaries estimated'})",
        f"- engine: {a.engine or b.engine}"
        + "".join(f"; {k} = {v}" for k, v in settings.items() if v is not None),
        *([f"- what-if: {', '.join(sess['what_if'])}"] if sess.get("what_if") else []),
        f"- builds: A = {a.build} ({a.generation}), B = {b.build} ({b.generation})",
        f"- status: A = {a.status}; B = {b.status}", ""]


def turn_threads(prep: SessionPrepared) -> list[str]:
    """The thread of each turn, in order (``session.turns.thread_of``)."""
    return [thread_of(t) for t in prep.turns.turns]


def _md_turns(runs: tuple[SessionRun, SessionRun], threads: dict[int, str],
              recorded: dict[int, dict[str, Any]] | None = None, agent: str = "") -> list[str]:
    """One row per turn: what each run reused and processed, its time, and a miss's cause; with
    several threads, which thread the turn was (a thread switch is a miss's usual cause); where
    the agent recorded its server's counts (``recorded``, by turn), those first."""
    a, b = runs
    several = len(set(threads.values())) > 1
    thread_col = ("| thread ", "|---") if several else ("", "")
    rec_col = (f"| {agent} reused | {agent} processed ", "|---:|---:") if recorded else ("", "")
    out = ["", "<details><summary>Per turn</summary>", "",
           f"| turn {thread_col[0]}{rec_col[0]}| A reused | A processed | A ms | B reused | B processed | B ms | miss |",
           f"|---:{thread_col[1]}{rec_col[1]}|---:|---:|---:|---:|---:|---:|---|"]
    for ta, tb in list(zip(a.turns, b.turns))[:MD_TURN_ROWS]:
        miss = "; ".join(f"{run}: {t.cause['cause']}" for run, t in (("A", ta), ("B", tb)) if t.cause)
        thread = " " + threads.get(ta.turn, MAIN).replace("|", "\\|") + " |" if several else ""
        q = (recorded or {}).get(ta.turn)
        rec = (f" {q['cache_n']:,} | {q['prompt_n']:,} |" if q else " — | — |") if recorded else ""
        out.append(f"| {ta.turn} |{thread}{rec} {ta.cache_n:,} | {ta.prompt_n:,} | {ta.prompt_ms:.1f} | "
                   f"{tb.cache_n:,} | {tb.prompt_n:,} | {tb.prompt_ms:.1f} | {miss} |")
    n = min(len(a.turns), len(b.turns))
    if n > MD_TURN_ROWS:
        out += ["", f"_{n - MD_TURN_ROWS:,} more turns: see `--json`._"]
    return out + ["", "</details>"]


def to_markdown(doc: dict[str, Any], runs: tuple[SessionRun, SessionRun]) -> str:
    out = _md_header(doc, runs) + [
        "| run | reused | processed | prompt time | batches | checkpoints | misses |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for r in doc["runs"]:
        out.append(f"| {r['label']} | {r['cache_n']:,} | {r['prompt_n']:,} | {r['prompt_ms'] / 1000:.2f} s | "
                   f"{r['n_batches']} | {r['n_checkpoints']} | {len(r['misses'])} |")
    for r, sr in zip(doc["runs"], runs):
        missed = [t for t in sr.turns if t.cause]
        if missed:
            out += ["", f"**{r['label']}** misses:", ""] + [f"- {miss_line(t)}" for t in missed[:30]]
        if r.get("why"):
            out += ["", f"**{r['label']}** threads:", ""] + [f"- {line}" for line in _why_lines(r)[:30]]
    out += observed_markdown(doc)
    if doc["session"]["notes"]:
        out += [""] + [f"> {n}" for n in doc["session"]["notes"]]
    out += _md_turns(runs, {t["turn"]: t.get("thread", MAIN) for t in doc["runs"][0].get("turns", ())},
                     observed_rows(doc.get("observed")), (doc.get("observed") or {}).get("agent", ""))
    return "\n".join(out + ["", f"_Generated by replayer {__version__}._", ""])
