"""The client-side what-ifs of a session replay, in one table.

A what-if changes what the agent sends, not the server. The same two are a replay flag
(``--freeze-system-prompt``), a keyword of ``prepare_session`` and of advise's session settings
(``freeze_system``), the app's what-if choice, and a client row of ``advise``; every one of those
reads this table, so a what-if added here is offered, replayed and priced everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE = "none"  # the app's choice for the session as recorded


@dataclass(frozen=True)
class WhatIf:
    name: str  # the flag without its dashes: the app's choice and the report's ``what_if`` entry
    field: str  # the keyword of ``prepare_session`` and the field of advise's session settings
    label: str  # what the app calls it (the session screen's header, the setup's choice)
    title: str  # advise's row
    change: str  # what to change in the agent to get it
    tradeoff: str = ""
    simulated_only: bool = False  # a real server renders the history itself

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def option(self) -> str:
        """The setup screen's choice: the label, the flag, and whether it is simulated only."""
        return f"{self.label} ({self.flag}{', simulated' if self.simulated_only else ''})"


WHAT_IFS = (
    WhatIf("freeze-system-prompt", "freeze_system", "freeze the system prompt",
           "keep the system prompt fixed between turns",
           "client: send the same system prompt on every turn (move dates, cwd or status lines out of it, "
           "e.g. into the latest user message)"),
    WhatIf("keep-reasoning", "keep_reasoning", "keep earlier reasoning",
           "keep the reasoning of earlier turns in the prompt",
           "client/template: send the history back as it was rendered, reasoning included (a template "
           "that keeps earlier reasoning, or a client that keeps it in the messages)",
           tradeoff="the kept reasoning is context the model reads on every later turn", simulated_only=True),
)


def label(name: str) -> str:
    """What the app calls what-if ``name`` (the name itself if the table has none)."""
    return next((w.label for w in WHAT_IFS if w.name == name), name)


def chosen(**switches: bool) -> str:
    """The name of the what-if the switches (``freeze_system=…``, ``keep_reasoning=…``) turn on
    (the first, in the table's order), or ``NONE``."""
    return next((w.name for w in WHAT_IFS if switches.get(w.field)), NONE)


def switches(name: str) -> dict[str, bool]:
    """The keyword switches of what-if ``name`` (all off for ``NONE``)."""
    return {w.field: w.name == name for w in WHAT_IFS}
