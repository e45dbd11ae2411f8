"""One exception type for everything a user can cause.

The CLI and the app print ``str(err)`` as a single line; anything else that escapes is
a bug in replayer, not in the user's input, and is allowed to show a traceback.
"""

from __future__ import annotations


class ReplayerError(Exception):
    """A problem with the user's input or environment, explained in one line."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:  # one line, always
        text = " ".join(str(self.args[0]).split()) if self.args else "error"
        return f"{text} ({self.hint})" if self.hint else text


class ImportFailed(ReplayerError):
    """A session file could not be imported at all."""


class FormatUnknown(ImportFailed):
    """No importer recognises the file."""


class TemplateError(ReplayerError):
    """A chat template failed to render (sandbox violation, raise_exception, syntax)."""


class BuildError(ReplayerError):
    """A llama-server build could not be fetched, built, probed or found."""


class RunError(ReplayerError):
    """A replay run failed (server crash, timeout, HTTP error)."""


def did_you_mean(word: str, choices: list[str]) -> str | None:
    """Suggest the closest known name, so typos get a helpful error instead of a list."""
    import difflib

    match = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=0.5)
    if not match:
        return None
    for c in choices:
        if c.lower() == match[0]:
            return c
    return None
