"""What llama-server hands a chat template: its message preparation, rule for rule.

A request body is not rendered as sent. llama-server (b9859, b10001; Jinja path) first
parses it into its own message structs and back (``common/chat.cpp``:
``common_chat_msgs_parse_oaicompat``, ``common_chat_msg::to_json_oaicompat``,
``render_message_to_json``), then applies the ``workaround::`` passes chosen by the
template's capabilities, which it finds by running the template on probe conversations and
watching which values the template touches (``common/jinja/caps.cpp``: ``caps_get``).
A trailing assistant message is not rendered as a turn but continued
(``oaicompat_chat_params_parse``, ``prefill_assistant``). docs/design.md ("Rendering as the
server renders") states each rule with its source.

Only the two builds replayer's live tests run are read; between them the one change is
b10001's whitespace trim for StepFun templates (``workaround::trim_all_content``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from replayer.core.errors import TemplateError

#: the media marker text a multimodal server puts where an image part was (``get_media_marker``
#: is random per server process unless LLAMA_MEDIA_MARKER pins it; replayer pins its own)
MEDIA_MARKER = "<__media__>"
_KEPT = ("reasoning_content", "name", "tool_call_id")
_STEPFUN = "You have access to the following functions in JSONSchema format"
STEPFUN_TRIM_FROM = 10001  # from this build the server trims messages for StepFun-style templates


def trims_for(source: str) -> bool:
    """Whether this template is one the server trims messages for (from ``STEPFUN_TRIM_FROM``)."""
    return _STEPFUN in source


@dataclass(frozen=True)
class Caps:
    """``jinja::caps`` as ``caps_get`` fills it (defaults are the struct's)."""

    string_content: bool = True
    typed_content: bool = False
    system_role: bool = True
    tool_calls: bool = True
    object_arguments: bool = False


@dataclass
class TemplateInputs:
    """The template's inputs: messages as the server rebuilt them, its tools, and the
    assistant message it continues instead of rendering (``continue_msg``), if any."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    continuation: dict[str, Any] | None = None
    continue_reasoning_only: bool = False


def _refuse(reason: str) -> TemplateError:
    return TemplateError(f"llama-server refuses this request: {reason}")


def _text_parts(content: list, allow_media: bool) -> list[dict[str, str]]:
    """The ``oaicompat_chat_params_parse`` pass over typed parts: text stays, an image becomes
    a media marker (on a server with a projector), anything else is refused."""
    parts = []
    for p in content:
        if not isinstance(p, dict):
            raise _refuse("a content part is not an object")
        t = p.get("type")
        if t == "text":
            if not isinstance(p.get("text"), str):
                raise _refuse("a text part has no text")
            parts.append({"type": "text", "text": p["text"]})
        elif t in ("image_url", "input_audio", "input_video"):
            if not allow_media:
                kind = {"image_url": "image", "input_audio": "audio", "input_video": "video"}[t]
                raise _refuse(f"{kind} input is not supported without a multimodal projector (--mmproj)")
            parts.append({"type": "media_marker", "text": MEDIA_MARKER})
        else:
            raise _refuse(f"unsupported content part type {t!r}")
    return parts


def _joined(parts: list[dict[str, str]]) -> str:
    """``to_json_oaicompat(concat_typed_text)``: text parts joined by a newline, none next to
    a media marker."""
    text = ""
    last_media = False
    for p in parts:
        if p["type"] == "text":
            if not last_media and text:
                text += "\n"
            last_media = False
        else:
            last_media = True
        text += p["text"]
    return text


def _check(m: Any) -> str:
    """``common_chat_msgs_parse_oaicompat``'s refusals of a message's shape; its role."""
    if not isinstance(m, dict) or "role" not in m:
        raise _refuse("a message has no role")
    role = m["role"]
    if role != "assistant" and "content" not in m:
        raise _refuse("all non-assistant messages must contain 'content'")
    if role == "assistant" and "content" not in m and "tool_calls" not in m:
        raise _refuse("an assistant message must contain either 'content' or 'tool_calls'")
    c = m.get("content")
    if c is not None and not isinstance(c, (str, list)):
        raise _refuse("'content' must be a string or an array")
    return role


def _calls(m: dict, objects: bool) -> list[dict[str, Any]]:
    """The tool calls as the server rebuilds them: ``id`` only when non-empty, arguments a JSON
    string (``args.dump()``), parsed into an object when the template reads objects
    (``func_args_not_string``; invalid JSON refuses the request)."""
    calls = []
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or tc.get("type") != "function" or "name" not in fn:
            raise _refuse(f"unsupported tool call {orjson.dumps(tc).decode()[:80]}")
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = orjson.dumps(args).decode()
        if objects:
            try:
                args = orjson.loads(args)
            except orjson.JSONDecodeError as exc:
                raise _refuse(f"failed to parse tool call arguments as JSON ({fn['name']}: {exc})") from None
        call: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
        if tc.get("id"):
            call["id"] = tc["id"]
        calls.append(call)
    return calls


def _rebuilt(m: dict, allow_media: bool, concat: bool, objects: bool) -> dict[str, Any]:
    """``common_chat_msgs_parse_oaicompat`` then ``common_chat_msg::to_json_oaicompat`` in one
    pass: the fields the server keeps, empty ones left out, content never null."""
    c = m.get("content") if type(m) is dict else None
    if type(c) is str and "role" in m:  # the common shape: checks need nothing more
        j: dict[str, Any] = {"role": m["role"], "content": c}
    else:
        j = {"role": _check(m)}
        if c is None:
            j["content"] = ""
        else:
            parts = _text_parts(c, allow_media)
            if not parts:
                j["content"] = ""
            elif concat or any(p["type"] == "media_marker" for p in parts):
                j["content"] = _joined(parts)
            else:
                j["content"] = parts
    if len(m) > 1 + ("content" in m):  # more than role and content (a Responses tool call has no content key)
        for key in _KEPT:
            v = m.get(key)
            if v and isinstance(v, str):
                j[key] = v
        if m.get("tool_calls"):
            calls = _calls(m, objects)
            if calls:
                j["tool_calls"] = calls
    return j


def _parsed(m: dict, allow_media: bool) -> dict[str, Any]:
    """The fields of a continued message the prompt uses (``common_chat_msg``)."""
    _check(m)
    c = m.get("content")
    r = m.get("reasoning_content")
    return {"content": c if isinstance(c, str) else "", "reasoning_content": r if isinstance(r, str) else "",
            "parts": _text_parts(c, allow_media) if isinstance(c, list) else []}


def render_content(msg: dict[str, Any], delimiter: str = "\n\n") -> str:
    """``common_chat_msg::render_content``: what a continued message contributes as text."""
    if msg["content"]:
        return msg["content"]
    return delimiter.join(p["text"] for p in msg["parts"] if p["type"] == "text")


def _tools(tools: list[dict] | None) -> list[dict[str, Any]] | None:
    """``common_chat_tools_parse_oaicompat`` + ``common_chat_tools_to_json_oaicompat``: each
    tool reduced to name, description (default empty) and parameters (default ``{}``)."""
    if not tools:
        return None
    out = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict) or "name" not in fn:
            raise _refuse(f"unsupported tool {orjson.dumps(t).decode()[:80]}")
        out.append({"type": "function", "function": {"name": fn["name"], "description": fn.get("description") or "",
                                                       "parameters": fn.get("parameters") or {}}})
    return out


def _trimmed(m: dict) -> dict:
    """b10001 ``workaround::trim_all_content`` (StepFun templates only): content, reasoning and
    text parts without surrounding whitespace."""
    ws = " \t\n\r"
    out = dict(m)
    for key in ("content", "reasoning_content"):
        if isinstance(out.get(key), str):
            out[key] = out[key].strip(ws)
    for key in ("content", "parts"):
        if isinstance(out.get(key), list):
            out[key] = [dict(p, text=p["text"].strip(ws)) if isinstance(p, dict) and p.get("type") == "text"
                        and isinstance(p.get("text"), str) else p for p in out[key]]
    return out


def template_inputs(source: str, caps: Caps, messages: list[dict], tools: list[dict] | None, *,
            add_generation_prompt: bool = True, build_number: int | None = None,
            allow_media: bool = False) -> TemplateInputs:
    """The messages and tools llama-server renders for this request body."""
    tl = _tools(tools)
    continuation = None
    body = messages
    if add_generation_prompt and messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        # prefill_assistant (on by default): a trailing assistant message is continued
        if len(messages) >= 2 and isinstance(messages[-2], dict) and messages[-2].get("role") == "assistant":
            raise _refuse("cannot have 2 or more assistant messages at the end of the list")
        continuation = _parsed(messages[-1], allow_media)
        body = messages[:-1]
    if build_number is not None and build_number >= STEPFUN_TRIM_FROM and trims_for(source):
        body = [_trimmed(m) for m in body]
        if continuation is not None:
            continuation = _trimmed(continuation)
    concat = caps.string_content and not caps.typed_content
    typed_only = caps.typed_content and not caps.string_content
    gpt_oss = "<|channel|>" in source
    msgs = [_rebuilt(m, allow_media, concat, caps.object_arguments) for m in body]
    for j in msgs:
        if typed_only and isinstance(j["content"], str):
            j["content"] = [{"type": "text", "text": j["content"]}]
        if j["role"] == "developer" and not gpt_oss:  # map_developer_role_to_system (not for GPT-OSS)
            j["role"] = "system"
        if gpt_oss and "reasoning_content" in j:  # common_chat_params_init_gpt_oss: reasoning → thinking
            j["thinking"] = j["reasoning_content"]
            if j.get("tool_calls"):
                del j["content"]
    if not caps.system_role and msgs and msgs[0]["role"] == "system":  # system_message_not_supported
        first = msgs.pop(0)
        if msgs:
            if not (isinstance(first.get("content"), str) and isinstance(msgs[0].get("content"), str)):
                raise _refuse("the template has no system role and the system prompt cannot be merged")
            msgs[0]["content"] = first["content"] + "\n" + msgs[0]["content"]
    reasoning_only = bool(continuation and continuation["reasoning_content"] and not continuation["content"]
                          and not continuation["parts"])
    return TemplateInputs(msgs, tl, continuation, reasoning_only)


def extra_context(now: datetime | None = None) -> dict[str, Any]:
    """``common_chat_extra_context``: the dates every template may read."""
    now = now or datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}
