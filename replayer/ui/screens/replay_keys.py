"""The replay screens' keys, and which of them the footer offers in each state.

While the runs go, the footer offers pause and cancel; once the verdict is shown those do
nothing, so they leave the footer, and "export" is live (it is shown dimmed before, so the user
sees it is coming). The speed keys stay: they set the speed of "replay again". Kept apart from the screen so the screen
holds what it renders, not its key table.
"""
from __future__ import annotations

from textual.binding import Binding

REPLAY_KEYS = [
    Binding("space", "toggle_pause", "pause/resume"),
    Binding("1", "speed('1')", "×1"),
    Binding("2", "speed('2')", "×10"),
    Binding("3", "speed('3')", "instant"),
    Binding("a", "cancel('A')", "cancel A"),
    Binding("b", "cancel('B')", "cancel B"),
    Binding("r", "restart", "replay again"),
    Binding("e", "export('md')", "export"),
    # in the help screen and the command palette, not the footer: each footer key is a
    # widget, and the footer was a fifth of the time to mount this screen
    Binding("s", "screenshot", "screenshot", show=False),
    Binding("plus,equals_sign", "zoom(2)", "zoom", show=False),
    Binding("minus", "zoom(0.5)", "zoom out", show=False),
    Binding("less_than_sign,comma", "pan(-1)", "pan", show=False),
    Binding("greater_than_sign,full_stop", "pan(1)", "pan", show=False),
    Binding("escape", "back", "setup"),
]
WHILE_RUNNING = frozenset({"toggle_pause", "cancel"})
AFTER_VERDICT = frozenset({"export"})


def offered(action: str, has_verdict: bool) -> bool | None:
    """Textual's ``check_action`` answer: True shown and live, False hidden, None shown dimmed."""
    if action in WHILE_RUNNING:
        return not has_verdict
    if action in AFTER_VERDICT:
        return True if has_verdict else None
    return True
