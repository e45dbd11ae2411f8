"""The watch's rows as text: one line a request (the app's table and ``watch --lines``), the
running totals, and the exports (JSON, Markdown, text) — all written through ``core/export.py``.

A row is at most ``ROW_WIDTH`` characters, so the table is whole at 80 columns (with a scroll
bar): request, endpoint letter, thread, the server's slot and its ``cached+new`` tokens and prompt
time, then the simulated slot (``*`` when the server chose another), its ``cached+new`` and prompt
time, and ``≠`` where the prediction's reuse is not the server's.
"""

from __future__ import annotations

from typing import Any

from replayer import __version__
from replayer.core.record.predict import Side, Totals, WatchRow

ROW_WIDTH = 77
#: the endpoint's letter in a row
ENDPOINT_MARK = {"/v1/chat/completions": "c", "/chat/completions": "c", "/v1/messages": "m", "/v1/responses": "r",
                 "/responses": "r", "/completion": "p", "/completions": "p", "/v1/completions": "p"}
FLAG = "≠"
SLOT_FLAG = "*"  # after the predicted slot: the server put the request on another one


def _tokens(s: Side | None) -> str:
    if s is None or s.cache_n is None or s.prompt_n is None:
        return f"{'—':>14}"
    return f"{s.cache_n:>7,}+{s.prompt_n:<6,}"


def _ms(s: Side | None, estimated: bool = False) -> str:
    if s is None or s.prompt_ms is None:
        return f"{'—':>8}"
    return f"{('~' if estimated else '') + format(s.prompt_ms, ',.1f'):>8}"


def _slot(row: WatchRow) -> str:
    if row.predicted_slot is None:
        return f"{'':>3}"
    return f"{str(row.predicted_slot) + (SLOT_FLAG if row.slot_differs else ''):>3}"


def header_line() -> str:
    return (f"{'#':>4} e {'thrd':<4} {'sl':>2} {'server: cached+new':>18} {'ms':>4} {'tok/s':>6} │ "
            f"{'sl':>3} {'predicted':>14} {'ms':>8}")


def row_line(row: WatchRow) -> str:
    """One request as a line of ``ROW_WIDTH`` characters or fewer."""
    o = row.observed
    tps = o.tok_s if not row.ms_estimated else None
    left = (f"{row.index:>4} {ENDPOINT_MARK.get(row.endpoint, '?')} {(row.thread or '—')[:4]:<4} "
            f"{'' if row.slot is None else row.slot:>2} {_tokens(o)} {_ms(o, row.ms_estimated)} "
            f"{'—' if tps is None else format(tps, ',.0f'):>6}")
    if row.predicted is None:
        right = (row.note or row.error or "")[:ROW_WIDTH - len(left) - 3]
    else:
        right = f"{_slot(row)} {_tokens(row.predicted)} {_ms(row.predicted)}"
    flag = f" {FLAG}" if row.differs else ""  # kept when outsized numbers push the line past the width
    return f"{left} │ {right}"[:ROW_WIDTH - len(flag)] + flag


def totals_lines(t: Totals, build: str) -> list[str]:
    """The running totals as two lines that fit 80 columns: the server's, then the prediction's."""
    server = (f"server: {t.requests} request{'s' if t.requests != 1 else ''}, re-processed "
              f"{t.observed_prompt_n:,} tokens in {t.observed_ms / 1000:.2f} s")
    if t.observed_timed < t.requests:  # Anthropic and Responses answers carry no timings
        server += f" ({t.observed_timed} timed)"
    pred = f"{build}: re-processed {t.predicted_prompt_n:,} tokens in {t.predicted_ms / 1000:.2f} s"
    # "differs on" said once for both: "slot on 0/5" alone read as "on slot 0"
    differs = ([f"reuse on {t.differ}/{t.compared}"] if t.compared else []) + \
        ([f"slot on {t.slots_differ}/{t.slots_compared}"] if t.slots_compared else [])
    if differs:
        pred += " · differs: " + ", ".join(differs)
    return [server, pred]


def totals_line(t: Totals, build: str) -> str:
    return " · ".join(totals_lines(t, build))


def report(rows: list[WatchRow], totals: Totals, meta: dict[str, Any]) -> dict[str, Any]:
    """The watch so far as one document (``meta``: upstream, listen URL, log, build, cost model)."""
    return {"replayer": __version__, "mode": "watch", **meta,
            "totals": {"requests": totals.requests, "observed_prompt_n": totals.observed_prompt_n,
                       "observed_prompt_ms": round(totals.observed_ms, 3), "observed_timed": totals.observed_timed,
                       "predicted_prompt_n": totals.predicted_prompt_n,
                       "predicted_prompt_ms": round(totals.predicted_ms, 3),
                       "compared": totals.compared, "differ": totals.differ,
                       "slots_compared": totals.slots_compared, "slots_differ": totals.slots_differ},
            "requests": [r.to_dict() for r in rows]}


def to_text(rows: list[WatchRow], totals: Totals, meta: dict[str, Any]) -> str:
    lines = [f"watch: {meta.get('listen')} → {meta.get('upstream')}, log {meta.get('log')}, predicted by "
             f"{meta.get('build')}", header_line()]
    lines += [row_line(r) for r in rows]
    lines.append(totals_line(totals, str(meta.get("build"))))
    return "\n".join(lines)


def to_markdown(rows: list[WatchRow], totals: Totals, meta: dict[str, Any]) -> str:
    out = [f"### replayer watch ({totals.requests} requests, predicted by {meta.get('build')})", "",
           f"**{totals_line(totals, str(meta.get('build')))}**", "",
           "| # | endpoint | thread | slot | server cached | server new | server ms | predicted slot | "
           "predicted cached | predicted new | predicted ms | differs |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def cell(v: Any, fmt: str = ",") -> str:
        return "—" if v is None else format(v, fmt)
    for r in rows:
        o, p = r.observed, r.predicted
        out.append(f"| {r.index} | {r.endpoint} | {r.thread or '—'} | {cell(r.slot, '')} | {cell(o.cache_n)} | "
                   f"{cell(o.prompt_n)} | {('~' if r.ms_estimated else '') + cell(o.prompt_ms, ',.1f')} | "
                   f"{cell(r.predicted_slot, '')}{SLOT_FLAG if r.slot_differs else ''} | "
                   f"{cell(p.cache_n if p else None)} | {cell(p.prompt_n if p else None)} | "
                   f"{cell(p.prompt_ms if p else None, ',.1f')} | "
                   f"{_differs(r)} |")
    return "\n".join(out)


def _differs(r: WatchRow) -> str:
    said = [w for w, on in (("yes", r.differs), ("slot", r.slot_differs)) if on]
    return ", ".join(said) or (r.note or "")


FORMATS = ("json", "md", "text")


def export(rows: list[WatchRow], totals: Totals, meta: dict[str, Any], fmt: str) -> bytes:
    """The bytes of an export, redacted like every report."""
    from replayer.core import export as ex

    if fmt == "json":
        return ex.doc_json(report(rows, totals, meta))
    if fmt in ("md", "markdown"):
        return ex.redacted(to_markdown(rows, totals, meta))
    if fmt == "text":
        return ex.redacted(to_text(rows, totals, meta))
    raise ValueError(f"unknown watch export format {fmt!r}; known: {', '.join(FORMATS)}")
