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
| ⏎ | start the replay (setup screen) |
| ctrl+b | bisect the builds between A and B on this session (setup screen) |
| space | pause / resume a simulated replay |
| 1 · 2 · 3 | speed ×1 · ×10 · instant |
| a · b | cancel run A · run B |
| r | replay again |
| e | export a Markdown report (palette: JSON, CSV) |
| s | save an SVG screenshot |
| + − ← → | zoom and scroll the token axis (focus a timeline) |
| ctrl+p | command palette (themes, exports, swap builds) |
| escape | back |

**Timeline rows:** ▼ user / tool-result starts · `·` assistant starts;
batches coloured by the rule that cut them — green `n_batch` (full), red `user_start`
(the #25213 regression), yellow `checkpoint_offset` (N−516, N−4), blue `prompt_end`;
◆ a context checkpoint.
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
