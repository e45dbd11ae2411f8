"""Textual's ``Footer``, recomposed only when the keys it shows change.

The stock footer removes and mounts all its key widgets on every bindings update, and a
screen sends several for nothing: pushing the replay screen sent three (focus, resume, the
first idle), and moving the focus between the timeline and the lists sends one each time,
though none of them changes a key the footer shows. Each recompose was a full-screen layout
and repaint of ten new widgets (13–30 ms of a replay frame on a 2-core Xeon); the replay
screen's footer now composes its keys once.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class KeyFooter(Footer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple | None = None  # what the current keys were composed from
        self._queued = False

    def shown_keys(self) -> tuple:
        """What ``Footer.compose`` draws from: the shown bindings, enabled or not, and the palette key."""
        active = self.screen.active_bindings
        keys = tuple((b.key, b.key_display, b.description, b.action, b.group, enabled, tooltip)
                     for _, b, enabled, tooltip in active.values() if b.show)
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        return keys, palette[1:] if palette and self.show_command_palette else None

    def compose(self) -> ComposeResult:
        """``Footer.compose``, each key made with the footer's ``compact`` already set: a key's
        own default (compact) was set by a watcher after it mounted, then the footer's value
        by its data binding, and each change restyled the key (two restyles of ten keys,
        ~45 ms of the frame that shows the replay screen's keys)."""
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                # the palette's key is not bound to the footer: it keeps a key's default, compact
                compact = True if widget.has_class("-command-palette") else self.compact
                widget.set_reactive(FooterKey.compact, compact)
                widget.set_class(compact, "-compact", update=False)
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True  # read by Footer.compose: the keys are known
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen or self._queued:
            return
        self._queued = True  # several updates before the next frame: one check
        self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        self._queued = False
        if not self.is_attached:
            return
        keys = self.shown_keys()
        if keys != self._shown:
            self._shown = keys
            await self.recompose()
