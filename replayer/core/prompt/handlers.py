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


def is_outdated_gemma4(source: str) -> bool:
    """A Gemma-4 template from before its "OpenAI Chat Completions" tool-response scan: the
    server rewrites its tool turns (chat.cpp:2625-2631 of b10001)."""
    return "'<|tool_call>call:'" in source and "{#- OpenAI Chat Completions:" not in source


def _has_tool_calls(msg: dict[str, Any]) -> bool:
    return isinstance(msg.get("tool_calls"), list) and bool(msg["tool_calls"])


def _has_content(msg: dict[str, Any]) -> bool:
    c = msg.get("content")
    return isinstance(c, (str, list)) and bool(c)


def gemma4_tool_responses(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``workaround::convert_tool_responses_gemma4`` (``gemma4_model_turn_builder``, chat.cpp:
    2227-2359 of b10001): an assistant turn with tool calls takes the tool results after it as
    ``tool_responses`` (name from the matching call, else the call id; content parsed as JSON
    when it is JSON) and the plain assistant answer after them as its content."""
    import json

    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        if msg.get("role") != "assistant" or not _has_tool_calls(msg):
            out.append(msg)
            i += 1
            continue
        calls = list(msg["tool_calls"])
        reasoning = msg.get("reasoning_content") if isinstance(msg.get("reasoning_content"), str) else None
        responses: list[dict[str, Any]] = []
        i += 1
        while i < len(messages) and messages[i].get("role") == "tool":
            cur = messages[i]
            response: Any = None
            if "content" in cur:
                response = cur["content"]
                if isinstance(response, str):
                    try:
                        response = json.loads(response)
                    except ValueError:
                        pass
            idx = len(responses)
            name = ""
            if idx < len(calls) and isinstance(calls[idx].get("function"), dict):
                name = calls[idx]["function"].get("name", "") or ""
            responses.append({"name": name or cur.get("tool_call_id", ""), "response": response})
            i += 1
        content = None
        if i < len(messages) and messages[i].get("role") == "assistant":
            nxt = messages[i]
            if not _has_tool_calls(nxt) and _has_content(nxt):
                content = nxt["content"]
                i += 1
        turn: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
        if responses:
            turn["tool_responses"] = responses
        if content is not None:
            turn["content"] = content
        if reasoning is not None:
            turn["reasoning_content"] = reasoning
        out.append(turn)
    return out


def is_lfm2(source: str) -> bool:
    """LFM2 (``<|tool_list_start|>``…``<|tool_list_end|>``) and LFM2.5 (a plain ``List of tools: [``
    without them): both go to ``common_chat_params_init_lfm2`` (chat.cpp:2595-2605 of b10001,
    :1159-1169 of b11434)."""
    if "<|tool_list_start|>" in source and "<|tool_list_end|>" in source:
        return True
    return "List of tools: [" in source and "<|tool_list_start|>" not in source


def lfm2_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``common_chat_params_init_lfm2`` copies a message's ``reasoning_content`` to the
    ``thinking`` field the LFM templates read (chat.cpp:1684-1690 of b10001, parsers/lfm2.cpp:27-33
    of b11434). It shows once past reasoning is kept (b11434's ``preserve_thinking``)."""
    return [dict(m, thinking=m["reasoning_content"]) if isinstance(m.get("reasoning_content"), str) else m
            for m in messages]
