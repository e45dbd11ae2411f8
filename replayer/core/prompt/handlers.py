"""The server's per-template handlers that reshape messages before the template renders them.

llama-server first tries a specialised handler for the template text
(``common_chat_try_specialized_template``, common/chat.cpp); some of them rewrite the messages
the template sees. Each rule here cites the handler it follows (same in b9859, b10001, b11434).
"""

from __future__ import annotations

from typing import Any


def is_ministral_3(source: str) -> bool:
    """Ministral/Magistral Large 3 (and every template that reads like it: Devstral-Small-2507):
    ``[SYSTEM_PROMPT]``, ``[TOOL_CALLS]``, ``[ARGS]`` and no ``[CALL_ID]`` (chat.cpp:2559 of
    b10001, :2543 of b9859, :1097 of b11434)."""
    return ("[SYSTEM_PROMPT]" in source and "[TOOL_CALLS]" in source and "[ARGS]" in source
            and "[CALL_ID]" not in source)


def ministral_3_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``common_chat_params_init_ministral_3`` (chat.cpp:975-1016 of b10001): a system or
    assistant message's content becomes blocks, a ``thinking`` block of its reasoning first,
    then its text (or its own blocks); ``reasoning_content`` goes. A template that reads the
    first block's text (Devstral) so loses the text of a turn that has reasoning."""
    out = []
    for msg in messages:
        if msg.get("role") not in ("system", "assistant"):
            out.append(msg)
            continue
        blocks: list[Any] = []
        if isinstance(msg.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": msg["reasoning_content"]})
        if "content" in msg:
            if isinstance(msg["content"], str):
                blocks.append({"type": "text", "text": msg["content"]})
            elif isinstance(msg["content"], list):
                blocks.extend(msg["content"])
        adjusted = {k: v for k, v in msg.items() if k != "reasoning_content"}
        adjusted["content"] = blocks
        out.append(adjusted)
    return out
