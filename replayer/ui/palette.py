"""The command palette's entries for the current screen: one per key binding of the screen,
so every action the screen offers can be found by name (ctrl+p), shown or not in the footer."""

from __future__ import annotations

from typing import Iterable

from textual.actions import parse as parse_action
from textual.app import SystemCommand
from textual.screen import Screen


def screen_commands(screen: Screen, taken: set[str]) -> Iterable[SystemCommand]:
    """A command per binding of ``screen`` with a description, unless ``taken`` has its title or
    the screen's ``check_action`` says the action is not offered now (cancel after the verdict)."""
    seen = {t.lower() for t in taken}
    for key, bindings in screen._bindings.key_to_bindings.items():
        for b in bindings:
            title = (b.description or "").strip()
            if not title or title.lower() in seen or not _offered(screen, b.action):
                continue
            seen.add(title.lower())
            keys = screen.app.get_key_display(b)
            yield SystemCommand(title[:1].upper() + title[1:], f"key: {keys}",
                                lambda action=b.action, s=screen: s.run_action(action))


def _offered(screen: Screen, action: str) -> bool:
    """False only when the screen hides the action (``check_action`` False); a dimmed one (None)
    stays: running it says why it cannot run yet."""
    _, name, params = parse_action(action)
    return screen.check_action(name, params) is not False
