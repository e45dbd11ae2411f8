"""One build's column in a session replay: the turn strip and running totals above the run pane.

The run pane below shows the *current* turn: its prompt on the timeline (the reused prefix
drawn as already there), its batches and checkpoint events; the batch list keeps a header
and a result line per turn, so scrolling back reads the session turn by turn. The per-turn
facts, the misses and their causes are the core's: the pane keeps the events it was given
and asks ``session_replay.session_run`` for them whenever a turn has finished. A turn still
running (or cut short by a cancel) is left out of those facts, so it never reads as a miss.

Enter on a turn of the strip scrolls the batch list to that turn's header: the pane keeps the
row each turn's header was written at (``turn_rows``, counted over every row the list was
given, so a list that dropped its oldest rows still finds the others).
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import Static

from replayer.core.engine import events as ev
from replayer.core.engine.slot_turns import SessionRun, TurnFinished, TurnStarted
from replayer.core.misses import lost_by_cause
from replayer.core.session.turns import thread_of
from replayer.core.session_replay import SessionFacts, SessionPrepared, miss_line
from replayer.core.words import counted
from replayer.ui.widgets.run_pane import Applied, FollowLog, RunPane
from replayer.ui.widgets.timeline import Timeline
from replayer.ui.widgets.turn_strip import CAUSE_MARKS, TurnStrip


class SessionPane(RunPane):
    def __init__(self, run: str, *, id: str | None = None) -> None:
        super().__init__(run, id=id)
        self.prep: SessionPrepared | None = None
        self._clear()

    def _clear(self) -> None:
        self.events: list[Any] = []
        self.settled = 0  # events up to the end of the last finished turn
        self.failed: ev.RunFailed | None = None
        self.facts: SessionRun | None = None
        self._reader: SessionFacts | None = None  # the facts, read on from where they were
        self._read = 0  # events given to it
        self._failed_read = False
        self.turn: int | None = None  # the turn being prefilled
        self.turns_done = 0
        self._first_batch = False
        self._dirty = False
        self._layout: tuple[int, int] | None = None  # (turn, its tokens): the timeline's, at the next apply
        self.turn_rows: dict[int, int] = {}  # turn → the batch list's row (over all rows written) of its header

    def compose(self) -> ComposeResult:
        yield TurnStrip(id="strip")
        yield from super().compose()

    def set_prepared(self, prep: SessionPrepared) -> None:
        self.prep = prep
        self.query_one(TurnStrip).set_turns(len(prep.turns.turns), [thread_of(t) for t in prep.turns.turns])

    @property
    def n_turns(self) -> int:
        return len(self.prep.turns.turns) if self.prep else 0

    def reset(self) -> None:
        super().reset()
        self._clear()
        self.query_one(TurnStrip).reset()

    def apply_one(self, e: Any, tl: Timeline, out: Applied) -> None:
        self.events.append(e)
        kind = type(e)
        if kind is TurnStarted:
            self.turn = e.turn
            self._first_batch = True
            # the timeline shows the turn being prefilled at the next repaint: an instant replay
            # goes through hundreds of turns between two, so their layouts are set once, in apply
            tl.reset(refresh=False)
            tl.n_past = 0
            self._layout = (e.turn, e.n_tokens)
            self.turn_rows[e.turn] = self.rows_written + len(out.rows)
            out.rows.append(f"── turn {e.turn}: {e.n_tokens:,} tokens, {e.common_prefix:,} as before ──")
            return
        if kind is TurnFinished:
            self.turn = None
            self.turns_done += 1
            self.settled = len(self.events)
            self._dirty = True
            note = " · full re-processing" if e.full_reprocess else ""
            note += f" · {e.error}" if e.error else ""
            out.rows.append(f"     reused {e.cache_n:,} · processed {e.prompt_n:,} · {e.prompt_ms:,.1f} ms{note}")
            out.progress = self.turns_done
            return
        super().apply_one(e, tl, out)
        if out.progress is not None:
            out.progress = self.turns_done  # the progress line counts turns, not the turn's tokens
        if kind is ev.BatchDone:
            if self._first_batch:  # the turn's prefill starts where the reused prefix ends
                tl.n_past = e.start
                self._first_batch = False
        elif kind is ev.RunStarted:
            self.total = self.n_turns  # the progress line counts turns
        elif kind is ev.RunFinished:
            self.settled = len(self.events)
            self._dirty = True
        elif kind is ev.RunFailed:
            self.failed = e
            self._dirty = True

    def apply(self, batch: list[Any]) -> None:
        super().apply(batch)
        if self._layout is not None:
            turn, n_tokens = self._layout
            self._layout = None
            prompts = self.prep.layouts[self.run].prompts if self.prep else []
            starts = prompts[turn].spans.user_starts if turn < len(prompts) else ()
            tl = self.query_one(Timeline)
            tl.set_layout(n_tokens, [("user", s) for s in starts], n_past=tl.n_past)
        if self._dirty:
            self.refresh_facts()
        else:
            strip = self.query_one(TurnStrip)
            if strip.current != self.turn:
                strip.current = self.turn
                strip.refresh()

    def refresh_facts(self) -> SessionRun | None:
        """The core's per-turn facts of the finished turns (and the failure, if the run failed)."""
        self._dirty = False
        if self.prep is None:
            return None
        if self._reader is None:
            self._reader = SessionFacts(self.prep, self.run)
        if self._read < self.settled:
            self.facts = self._reader.feed(self.events[self._read:self.settled])
            self._read = self.settled
        if self.failed is not None and not self._failed_read:
            self.facts = self._reader.feed([self.failed])
            self._failed_read = True
        if self.facts is None:
            self.facts = self._reader.feed([])
        self.query_one(TurnStrip).update_turns(self.facts.turns, current=self.turn)
        self._stats()
        return self.facts

    def on_turn_strip_selected(self, event: TurnStrip.Selected) -> None:
        """The chosen turn's facts where the running totals were (they come back with the next turn);
        on Enter the batch list shows the turn's rows."""
        self.query_one("#stats", Static).update(self.turn_detail(event.turn), layout=False)
        if event.scroll:
            self.scroll_to_turn(event.turn)

    def scroll_to_turn(self, turn: int) -> bool:
        """The batch list scrolled so that ``turn``'s header is its top row (or as near as the
        list's end allows), no longer following the newest batch. False when the list does not
        hold that turn (not started yet, or dropped with the oldest rows)."""
        log = self.query_one("#batches", FollowLog)
        row = self.turn_rows.get(turn)
        if row is None:
            return False
        line = row - (self.rows_written - log.line_count)
        if line < 0:
            self.notify(f"turn {turn}'s batches are no longer in the list (it keeps the last {log.max_lines:,} rows)",
                        timeout=4)
            return False
        log.auto_scroll = False
        # after the next layout: on a tiny terminal the list was hidden under the verdict until now
        self.call_after_refresh(log.scroll_to, y=line, animate=False, immediate=True)
        return True

    def turn_detail(self, turn: int) -> str:
        """What the core says of one turn: reuse, batches, checkpoints and, for a miss, its cause."""
        t = next((t for t in (self.facts.turns if self.facts else []) if t.turn == turn), None)
        th = self.query_one(TurnStrip).thread_of(turn)
        thread = f" · {th}" if th else ""  # the thread, when the session has several: after the numbers
        if t is None:
            return f"▲ {turn}: " + ("running" if turn == self.turn else "not replayed yet") + thread
        restored = f" · restored the one at {t.restored.n_tokens:,}" if t.restored else ""
        slot = f" · slot {t.slot}" if t.slot is not None else ""
        # "▲" as on the strip's axis: the line fits a pane at 80 columns
        text = f"▲ {turn}: reused {t.cache_n:,} · new {t.prompt_n:,} · {t.prompt_ms / 1000:,.1f} s{slot}{thread}\n"
        counts = f"{counted(t.n_batches, 'batch')} · {counted(t.n_created, 'checkpoint')}{restored}"
        if not t.cause:
            return text + counts + " · no miss"
        # the miss first (a narrow pane cuts the end of the line), its detail last
        head = f"{t.cause['cause']}, {t.cause['lost_tokens']:,} tokens"
        rest = miss_line(t).removeprefix(f"turn {turn}: {head} re-processed")
        return text + f"miss: {head} · {counts} · lost{rest}"

    def _stats(self) -> None:
        s = self.facts
        if s is None:
            self.query_one("#stats", Static).update("no turn finished yet", layout=False)
            return
        lost = lost_by_cause(s)
        text = (f"processed {s.prompt_n:,} tok in {s.prompt_ms / 1000:,.1f} s · reused {s.cache_n:,} · "
                f"{len(s.turns)}/{self.n_turns} turns\n")
        if lost:
            text += "misses: " + " · ".join(
                f"{CAUSE_MARKS[c][0]} {int(v['turns'])}× {int(v['tokens']):,} tok {v['ms'] / 1000:,.1f} s"
                for c, v in lost.items())
        else:
            text += f"no misses · {counted(s.n_batches, 'batch')} · {counted(s.n_checkpoints, 'checkpoint')}"
        self.query_one("#stats", Static).update(text, layout=False)
