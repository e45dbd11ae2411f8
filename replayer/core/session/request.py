"""Session → the OpenAI-style body the agent sends to llama-server on resume.

Where the agent does not store its system prompt or tool list (pi ≤ 0.85, Claude Code,
OpenCode), the result says so in ``missing`` and the caller may supply them; replayer
never invents them silently, because they are often a large share of the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ReplayerError
from replayer.core.session.model import ImagePart, Message, Session, TextPart
from replayer.core.textfile import read_bytes, read_text


@dataclass
class ChatRequest:
    body: dict[str, Any]
    missing: list[str] = field(default_factory=list)  # "system_prompt", "tools"
    notes: list[str] = field(default_factory=list)
    #: parts the agent sends before the prompt opening each run (Qwen Code's date reminder), and
    #: the messages without them: each turn places them before its own latest prompt
    run_parts: Any = None
    plain_messages: list[dict[str, Any]] | None = None
    #: messages[:n] are what a compaction left from the history before it (``Session.compacted_prefix``)
    compacted_prefix: int = 0
    #: the agent's own counts of a request, by the index of the response that answered it (``Message.recorded``)
    recorded: dict[int, Any] = field(default_factory=dict)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body["messages"]

    def to_json(self, indent: bool = True) -> bytes:
        return orjson.dumps(self.body, option=orjson.OPT_INDENT_2 if indent else 0)


#: sessions of prompts as the server tokenized them (``--log-prompts-dir``): the system prompt is in
#: their text, so nothing is missing to supply
RENDERED_FORMATS = ("prompt-log",)

def message_to_openai(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role}
    if isinstance(m.content, list):
        parts: list[dict[str, Any]] = []
        for p in m.content:
            if isinstance(p, TextPart):
                parts.append({"type": "text", "text": p.text})
            elif isinstance(p, ImagePart):
                # the bytes were never loaded: a well-formed stand-in keeps the shape
                parts.append({"type": "image_url", "image_url": {"url": f"data:{p.mime};base64,"}})
        out["content"] = parts
    else:
        out["content"] = m.content
    if m.role == "assistant":
        if m.reasoning:
            out[m.reasoning_field] = m.reasoning
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
                for tc in m.tool_calls
            ]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id
    return out


def load_system_prompt(path: str | Path) -> str:
    return read_text(path, "system prompt")


def load_tools(path: str | Path) -> list[dict[str, Any]]:
    """Tools as an OpenAI ``tools`` array, or a request body holding one."""
    p = Path(path).expanduser()
    try:
        data = orjson.loads(read_bytes(p, "tools file"))
    except orjson.JSONDecodeError as exc:
        raise ReplayerError(f"tools file {p} is not JSON: {exc}") from None
    if isinstance(data, dict):
        data = data.get("tools")
    if not isinstance(data, list):
        raise ReplayerError(f"tools file {p} must hold a JSON array of tools (or an object with 'tools')")
    tools = []
    for t in data:
        if isinstance(t, dict) and "function" not in t and "name" in t:
            t = {"type": "function", "function": t}
        tools.append(t)
    return tools


def request_from_files(session: Session, system_prompt_path: str | None = None,
                       tools_path: str | None = None) -> ChatRequest:
    """``build_request`` with the user's ``--system-prompt FILE`` / ``--tools FILE``, when given,
    else with what ``replayer agents capture`` learnt from the user's own agent, when cached."""
    from replayer.core.agents.apply import add_user_prefixes, captured_parts

    sp = load_system_prompt(system_prompt_path) if system_prompt_path else None
    tl = load_tools(tools_path) if tools_path else None
    parts = captured_parts(session, need_prompt=sp is None, need_tools=tl is None and session.tools is None)
    req = build_request(session, system_prompt=sp if sp is not None else parts.system_prompt,
                        tools=tl if tl is not None else parts.tools, system_role=parts.system_role)
    req.notes.extend(parts.notes)
    run = add_user_prefixes(req.body["messages"], parts)
    users = [i for i, m in enumerate(req.body["messages"]) if m.get("role") == "user"]
    if run is not None and users:
        req.run_parts, req.plain_messages = run, req.body["messages"]
        req.body["messages"] = run.place(req.plain_messages, users[-1])
    return req


def build_request(session: Session, *, system_prompt: str | None = None,
                  tools: list[dict[str, Any]] | None = None, system_role: str | None = None) -> ChatRequest:
    req = ChatRequest(body={})
    sp = system_prompt if system_prompt is not None else session.system_prompt
    tl = tools if tools is not None else session.tools
    msgs: list[dict[str, Any]] = []
    # the conversation's own first message is its prompt (a chat body), unless the session stores
    # the prompt apart: then a leading developer item is one more message (Codex)
    first_is_system = bool(session.messages) and session.messages[0].role in ("system", "developer") \
        and session.system_prompt is None and session.messages[0].origin != "developer"
    if sp is not None:
        msgs.append({"role": system_role or session.system_role, "content": sp})
        if first_is_system and system_prompt is not None:
            req.notes.append("the supplied system prompt replaces the stored one")
    elif not first_is_system and session.format not in RENDERED_FORMATS:
        req.missing.append("system_prompt")
    body_msgs = [message_to_openai(m) for m in session.messages]
    if sp is not None and first_is_system:
        body_msgs = body_msgs[1:]
    msgs.extend(body_msgs)
    req.body["messages"] = msgs
    if session.compacted_prefix:
        req.compacted_prefix = session.compacted_prefix + len(msgs) - len(session.messages)
    req.recorded = {i + len(msgs) - len(session.messages): m.recorded for i, m in enumerate(session.messages)
                    if m.recorded is not None}
    if tl is not None:
        req.body["tools"] = tl
    elif session.n_tool_calls:
        req.missing.append("tools")
    for k, v in session.extra_body.items():
        req.body.setdefault(k, v)
    if session.model:
        req.body.setdefault("model", session.model)
    if req.missing:
        from replayer.core.agents.apply import missing_estimate
        from replayer.core.agents.registry import agent_of_format

        capture = (", or capture them with `replayer agents capture`"
                   if agent_of_format(session.format) is not None else "")  # only agents it can run
        req.notes.append(
            f"{session.format} does not store the {' and '.join(m.replace('_', ' ') for m in req.missing)}"
            f" of this session{missing_estimate(session.format, req.missing)}; supply them with "
            f"--system-prompt / --tools{capture}, for an exact prompt"
        )
    return req
