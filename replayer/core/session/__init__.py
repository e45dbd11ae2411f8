"""Session import: one module per agent format (each declares an ``Importer``), one entry point."""

from __future__ import annotations

from pathlib import Path

from replayer.core.errors import ImportFailed
from replayer.core.session import registry
from replayer.core.session.detect import detect_format
from replayer.core.session.model import Message, Session
from replayer.core.session.reader import check_readable_file
from replayer.core.session.request import ChatRequest, build_request

__all__ = ["FORMATS", "ChatRequest", "Message", "Session", "build_request", "detect_format", "load_session"]


def __getattr__(name: str):
    if name == "FORMATS":  # the registered format names (found on first use)
        return registry.names()
    raise AttributeError(name)


def load_session(path: str | Path, format: str | None = None, *, images: str = "omit",
                 session_id: str | None = None) -> Session:
    """Import a session file read-only; raises ``ImportFailed`` with a one-line reason."""
    p = Path(path).expanduser()
    imp = registry.importer(format) if format is not None else registry.importer(detect_format(p))
    if not p.exists():
        raise ImportFailed(f"no such file: {p}")
    if not p.is_dir():
        check_readable_file(p)
    if format is not None:
        registry.check_forced(p, format)
    try:
        s = imp.load(p, registry.LoadOptions(images=images, session_id=session_id))
    except RecursionError:
        raise ImportFailed(f"{p}: a record is nested too deeply to be a {imp.name} session") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        if isinstance(exc, ImportFailed):
            raise
        raise ImportFailed(f"{p} does not look like a {imp.name} session ({_first_error(exc)})") from None
    if not s.messages:
        raise ImportFailed(f"{p}: no messages could be imported")
    return s


def _first_error(exc: Exception) -> str:
    """One line for what went wrong: a pydantic error's first field, not its whole dump."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first, n = errors()[0], exc.error_count()  # type: ignore[attr-defined]
            where = ".".join(str(x) for x in first.get("loc", ())) or "?"
            more = f" and {n - 1} more" if n > 1 else ""
            return f"field {where}: {first.get('msg', 'invalid')}{more}"[:200]
        except (IndexError, AttributeError, TypeError):
            pass
    return f"{type(exc).__name__}: {exc}"[:200]
