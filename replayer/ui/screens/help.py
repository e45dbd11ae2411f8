"""Keys and what the colours mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# replayer

Replays the **prefill** of a resumed agent session on two llama-server builds.

| key | does |
|---|---|
| ? · F1 | this help (esc, q or ? closes it) |
| ctrl+q | quit |
| ⏎ · / · s | sessions: open the highlighted one · filter as you type (⏎ back to the list, esc clears) · sort (newest, tokens, size, agent, title) |
| o · d | sessions: type a path (→ completes) · open the bundled demo |
| ↑↓ · PgUp PgDn · Home End | move in a list or table; Tab focuses the next list, then these scroll it |
| Tab · shift+Tab | move between controls (setup, builds) |
| ⏎ · space · ↓ | open a dropdown; ↑↓ then ⏎ chooses, esc closes |
| ctrl+r | start the replay (setup; ⏎ on the Replay button or in a text field too) |
| ctrl+b | builds: the catalog, what is installed, install one (i), cancel (c), its log (l) |
| ctrl+g | bisect the builds between A and B on this session (setup screen); ctrl+x cancels it, esc goes back |
| space | pause / resume; a live server keeps computing, its events wait until you resume |
| 1 · 2 · 3 | speed ×1 · ×10 · instant (the ETA follows the current speed) |
| a · b | cancel run A · run B (a live run's server stops); the run is marked partial |
| r | replay again: the screen shows only the new runs |
| e | export a Markdown report (palette: JSON, CSV) |
| s | save an SVG screenshot (the toast names the file) |
| + − · < > | zoom · pan both timelines together |
| ← → | scroll the focused timeline by tokens (Tab to it first) |
| ctrl+p | command palette (themes, exports, swap builds, builds) |
| escape | back |

**Timeline rows:** ▼ user / tool-result starts · `·` assistant starts; a column with
several starts is shaded by how many (░ 2–3, ▒ 4–9, ▓ 10–24, █ 25+);
batches coloured and marked by the rule that cut them — ┃ green `n_batch` (full), ╋ red `user_start`
(the #25213 regression), ┇ yellow `checkpoint_offset` (N−516, N−4), ▐ blue `prompt_end`, ╎ other;
◆ a context checkpoint.

**Session mode** (setup: mode → session; what-if: freeze the system prompt): each build's
**turn strip** has one cell per turn (several per cell on a long session) — the bar's height
is the share of the prompt re-processed, the green behind it the share reused; a **miss**
shows its cause's letter, as the strip's legend names it: C client changed text (earlier
in the prompt) · R reasoning dropped (by the template) · K compaction · N no usable checkpoint ·
F context full · T another thread held the server · S the server slept (--sleep-idle-seconds) ·
U the router unloaded the model (--models-max).
A session with subagents or side requests has one **lane per thread** (main first). Below it
the current turn's timeline, batches and checkpoints; the verdict compares the builds over
the whole session.

| key (turn strip: Tab to it) | does |
|---|---|
| ← → | the previous / next turn (of the selected turn's thread) |
| ↑ ↓ | the nearest turn of the thread above / below |
| n | the next miss |
| ⏎ | the turn's facts, and its batches at the top of the batch list (the verdict makes room) |
| v | the verdict again, after ⏎ |

**Watch** (`replayer watch --upstream URL`): the same strips for the server and for build B's
prediction, one cell a request as it passes the proxy (T: another thread held the server); one
line a request — the server's cached+new tokens, prompt time (~ the first byte's, when the answer
had no timings) and tok/s beside the prediction, ≠ where the predicted reuse is not the server's.
b chooses build B; l follows the server's own log (its slots, full re-processing) from then on;
e · j export Markdown · JSON; q quits (the proxy stops with the app).
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; max-width: 95%; height: 80%; border: round $primary; background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)

    def action_dismiss(self) -> None:
        self.dismiss(None)
