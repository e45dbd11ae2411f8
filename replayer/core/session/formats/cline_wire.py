"""What Cline's message builder does to the stored history each time it sends a request.

Cline 3.0.65 stores tool results and replies whole, and cuts them when it builds a request
(``class YW``, ``buildForApi``, of its ``@cline/core`` 0.0.86, ``dist/index.js:182-202``, the
same code as in the CLI's binary): a string over 8,000 characters (JavaScript's length, UTF-16
code units) in a tool result keeps its head and tail around ``...[truncated N chars]...``
(``function H8``); in a result that is a list of objects (``run_commands``'
``[{"query", "result", "success"}]``) each string inside is cut so, before the list becomes its
JSON text. An assistant text over 200,000 characters is cut the same way (12,000 when it
repeats tool-call markup eight times or more). Rebuilding a request from the file therefore
cuts them too, or every request after a long tool output is longer than the one sent.

Not rebuilt (each is named in the docs): the limits' environment overrides
(``CLINE_MESSAGE_BUILDER_MAX_TOOL_RESULT_CHARS``, not in the file), the rewrite of an earlier
``read_files`` result to ``[outdated - see the latest file content]`` once a later read of the
same file would reclaim 64 KiB, and the 6,000,000-byte budget of a whole request's text.
"""

from __future__ import annotations

import re
from typing import Any, Callable

#: the message builder's defaults (``var xb=8000,yb=50000,…,hb=200000,vb=12000,…,mb=8``)
MAX_TOOL_RESULT_CHARS = 8000
MAX_ASSISTANT_CHARS = 200_000
MAX_ASSISTANT_MARKUP_CHARS = 12_000
MARKUP_REPEATS = 8
_TOOL_MARK = "\n\n...[truncated {} chars]...\n\n"
_ASSISTANT_MARK = "\n\n...[assistant text truncated: omitted {} chars]...\n\n"
_MARKUP_MARK = "\n\n...[assistant text truncated: omitted {} chars due to repeated tool-call markup]...\n\n"
_BAR = r"[\|\uFF5C]"
#: tool-call markup in a reply (``pb``): DSML tags, ``<tool_call>``, ``<function_calls>``, ``<invoke>``
_MARKUP = re.compile(rf"<\s*(?:{_BAR}\s*)?DSML\s*(?:{_BAR}\s*)?(?:tool_calls|invoke)\b[^>]*>|"
                     r"<\s*/?\s*(?:tool_calls?|tool_call|function_calls?|function_call|invoke)\b[^>]*>", re.I | re.A)


def _js_len(s: str) -> int:
    """``s.length`` in JavaScript: UTF-16 code units (a character past U+FFFF counts two)."""
    return len(s) if s.isascii() else len(s) + sum(1 for c in s if ord(c) > 0xFFFF)


def _js_slice(s: str, start: int, end: int) -> str:
    """``s.slice(start, end)`` in UTF-16 code units; half of a pair cut off becomes U+FFFD (a
    lone surrogate cannot be sent as UTF-8)."""
    if s.isascii() or _js_len(s) == len(s):
        return s[start:end]
    raw = s.encode("utf-16-le", "surrogatepass")[2 * start:2 * end]
    return raw.decode("utf-16-le", "replace")


def truncate_middle(s: str, limit: int, marker: str = _TOOL_MARK) -> str:
    """Cline's ``H8``: ``s`` whole if it fits ``limit``, else its head and tail, each half of
    what the marker leaves, around the marker naming how many characters went."""
    n = _js_len(s)
    if n <= limit:
        return s
    first = marker.format(n - limit)
    keep = max(0, (limit - len(first)) // 2)
    mark = marker.format(max(0, n - 2 * keep))
    half = max(0, (limit - len(mark)) // 2)
    return _js_slice(s, 0, half) + mark + (_js_slice(s, n - half, n) if half > 0 else "")


def _nested(v: Any, cut: Callable[[str], str]) -> Any:
    """Every string inside ``v`` cut (``truncateNestedStrings``), an image with its data aside."""
    if isinstance(v, str):
        return cut(v)
    if isinstance(v, list):
        return [_nested(x, cut) for x in v]
    if isinstance(v, dict):
        if v.get("type") == "image" and isinstance(v.get("data"), str) and isinstance(v.get("mediaType"), str):
            return v
        return {k: _nested(x, cut) for k, x in v.items()}
    return v


def tool_result_as_sent(content: Any, limit: int = MAX_TOOL_RESULT_CHARS) -> Any:
    """A stored ``tool_result`` content as Cline sends it (``truncateToolResultContent``): a
    string cut; in a list, a text block's text and a file block's content cut, every string of
    any other object (not an image) cut."""
    def cut(s: str) -> str:
        return truncate_middle(s, limit)

    if isinstance(content, str):
        return cut(content)
    if not isinstance(content, list):
        return content
    out = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
            b = {**b, "text": cut(b["text"])}
        elif isinstance(b, dict) and b.get("type") == "file" and isinstance(b.get("content"), str):
            b = {**b, "content": cut(b["content"])}
        elif isinstance(b, dict) and b.get("type") not in ("text", "image", "file"):
            b = _nested(b, cut)
        out.append(b)
    return out


def assistant_text_as_sent(text: str) -> str:
    """A stored reply text as Cline sends it (``truncateAssistantText``)."""
    if _js_len(text) > MAX_ASSISTANT_MARKUP_CHARS and _repeats_markup(text):
        return truncate_middle(text, MAX_ASSISTANT_MARKUP_CHARS, _MARKUP_MARK)
    return truncate_middle(text, MAX_ASSISTANT_CHARS, _ASSISTANT_MARK)


def _repeats_markup(text: str) -> bool:
    for k, _ in enumerate(_MARKUP.finditer(text), 1):
        if k >= MARKUP_REPEATS:
            return True
    return False
