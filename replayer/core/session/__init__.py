"""Session import: one module per agent format (each declares an ``Importer``), one entry point."""

from __future__ import annotations

from pathlib import Path

from replayer.core.errors import ImportFailed
from replayer.core.session import registry, salvage
from replayer.core.session.model import Message, Session
from replayer.core.session.reader import JsonlFile, check_readable_file
from replayer.core.session.request import ChatRequest, build_request

__all__ = ["FORMATS", "ChatRequest", "Message", "Session", "build_request", "detect_format", "load_session"]


def __getattr__(name: str):
    if name == "FORMATS":  # the registered format names (found on first use)
        return registry.names()
    raise AttributeError(name)


def detect_format(path: str | Path) -> str:
    """Which agent wrote this file, from its content, not its name (``registry.detect``)."""
    return registry.detect(Path(path))


def load_session(path: str | Path, format: str | None = None, *, images: str = "omit",
                 session_id: str | None = None, thread: str | None = None, once: JsonlFile | None = None) -> Session:
    """Import a session file read-only; raises ``ImportFailed`` with a one-line reason. ``once``:
    the file parsed already by another import of it (``reader.JsonlFile``: a sidechain's)."""
    p = Path(path).expanduser()
    imp = registry.importer(format) if format is not None else registry.importer(detect_format(p))
    if not p.exists():
        raise ImportFailed(f"no such file: {p}")
    if not p.is_dir():
        check_readable_file(p)
    if format is not None:
        registry.check_forced(p, format)
    options = registry.LoadOptions(images=images, session_id=session_id, thread=thread, once=once)
    try:  # a record with a bad field is left out by name (salvage.py), not the whole session
        s = salvage.load(lambda: imp.load(p, options))
    except RecursionError:
        raise ImportFailed(f"{p}: a record is nested too deeply to be a {imp.name} session") from None
    except salvage.DATA_ERRORS as exc:
        raise ImportFailed(f"{p} does not look like a {imp.name} session ({salvage.first_error(exc)})") from None
    if not s.messages:
        raise ImportFailed(f"{p}: no messages could be imported")
    return s
