"""Session import: one module per agent format, one entry point."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.core.errors import ImportFailed, did_you_mean
from replayer.core.session.detect import FORMATS, detect_format
from replayer.core.session.model import Message, Session
from replayer.core.session.request import ChatRequest, build_request

__all__ = ["FORMATS", "ChatRequest", "Message", "Session", "build_request", "detect_format", "load_session"]


def load_session(path: str | Path, format: str | None = None, *, images: str = "omit",
                 session_id: str | None = None) -> Session:
    """Import a session file read-only; raises ``ImportFailed`` with a one-line reason."""
    from replayer.core.session import aider, claude_code, codex, llamacpp_webui, openai_body, opencode, pi, sharegpt
    from replayer.core.session.reader import check_readable_file

    p = Path(path).expanduser()
    if format is not None and format not in FORMATS:
        hint = did_you_mean(format, FORMATS)
        raise ImportFailed(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}",
                           hint=f"did you mean {hint}?" if hint else None)
    fmt = format or detect_format(p)
    if not p.exists():
        raise ImportFailed(f"no such file: {p}")
    try:
        if fmt == "opencode":
            if p.is_dir() or not opencode.is_sqlite(p):
                return opencode.load_storage(p, images=images)
            return opencode.load_db(p, session_id, images=images)
        check_readable_file(p)
        if fmt == "pi":
            s = pi.load(p, images=images)
        elif fmt == "claude-code":
            s = claude_code.load(p, images=images)
        elif fmt == "codex":
            s = codex.load(p, images=images)
        elif fmt == "aider":
            s = aider.load(p)
        elif fmt == "chat-requests":
            from replayer.core.session import request_log

            s = request_log.load(p, images=images)
        else:
            try:
                doc = orjson.loads(p.read_bytes())
            except orjson.JSONDecodeError as exc:
                raise ImportFailed(f"{p} is not valid JSON: {exc}") from None
            if fmt == "llamacpp-webui":
                if not llamacpp_webui.detect(doc):
                    raise ImportFailed(f"{p} is not a llama.cpp web-UI export")
                s = llamacpp_webui.load(p, doc, images=images)
            elif fmt == "openai":
                if not openai_body.detect(doc):
                    raise ImportFailed(f"{p} is not an OpenAI chat-completions body")
                s = openai_body.load(p, doc, images=images)
            else:
                if not sharegpt.detect(doc):
                    raise ImportFailed(f"{p} is not a ShareGPT file")
                s = sharegpt.load(p, doc)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        if isinstance(exc, ImportFailed):
            raise
        raise ImportFailed(f"{p} does not look like a {fmt} session ({type(exc).__name__}: {exc})") from None
    if not s.messages:
        raise ImportFailed(f"{p}: no messages could be imported")
    return s
