"""The system prompt and tools an agent really sends, read from one of its requests.

Agents store the conversation but not (or not as sent) the prompt around it, which is often
most of the first request's tokens. The agent itself is the only reference: a request it sent
to the stub model holds its prompt and tools, in its own wire format; this module takes them
out of that request in replayer's chat shape and keeps them, keyed by agent and version, in
the user's cache (never in the repository: the prompts are the agents' own).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from replayer.core.paths import cache_dir


@dataclass
class Capture:
    agent: str
    version: str
    api: str  # chat | responses | anthropic
    system_role: str = "system"  # pi and Codex send theirs as developer
    system_prompt: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI chat ``tools``
    notes: list[str] = field(default_factory=list)
    project: str | None = None  # the working directory of the capture run (a session's own replaces it)
    date: str | None = None  # the capture run's date, YYYY-MM-DD (a session's own replaces it)
    home: str | None = None  # the capture run's temporary HOME (the session's own replaces it)
    first_user_prefix: list[str] = field(default_factory=list)  # text parts sent before the first prompt
    later_user_prefix: list[str] = field(default_factory=list)  # … before each later prompt (Qwen Code)
    #: made as one process reading both prompts (Qwen Code's stream-json input), not ``-p`` then ``-c -p``
    one_process: bool = False
    #: each subagent type's own request, as the main agent's run started it (Qwen Code's
    #: ``agent`` tool): type → ``system_prompt``, ``tools`` and ``first_user_prefix`` (the text
    #: parts before its task); its files store none of them
    subagents: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the request the agent sends to have a compaction's summary written (``compaction_of``):
    #: ``prompt`` (its summarization prompt, the last user text), ``system`` and ``tools`` (each
    #: ``"same"`` as the conversation's, ``"none"``, or ``"own"`` with ``system_prompt`` / ``own_tools``)
    compaction: dict[str, Any] | None = None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and "text" in b)
    return ""


def function_tool(name: str, description: Any, parameters: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    fn["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def gemini_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A generateContent body's function declarations as chat tools (what a translating proxy in
    front of llama-server sends): name, description and the JSON schema of the parameters."""
    out = []
    for t in body.get("tools") or []:
        for f in t.get("functionDeclarations") or [] if isinstance(t, dict) else []:
            if isinstance(f, dict) and isinstance(f.get("name"), str):
                out.append(function_tool(f["name"], f.get("description"),
                                         f.get("parametersJsonSchema") or f.get("parameters")))
    return out


def server_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses body's tools as llama-server renders them: its function tools with every field
    kept (``strict`` too, true where absent); a ``namespace`` or built-in tool (Codex's
    ``multi_agent_v1``, ``web_search``) is skipped by the server ("unsupported Responses tool
    type … skipped", server-chat.cpp), so it is no part of the prompt either."""
    from replayer.core.session.server_conversions import ConversionError, responses_to_chat

    try:
        return responses_to_chat({"input": [], "tools": body.get("tools") or []}).get("tools", [])
    except ConversionError:
        return []


def _tool_label(t: dict[str, Any]) -> str:
    inner = t.get("tools") if isinstance(t.get("tools"), list) else None
    name = f"{t.get('type')} {t['name']}" if isinstance(t.get("name"), str) else str(t.get("type"))
    return f"{name} of {len(inner)} tools" if inner is not None else name


def from_request(agent: str, version: str, api: str, body: dict[str, Any]) -> Capture:
    """The prompt and tools of one request the agent sent (its first: no history yet)."""
    cap = Capture(agent, version, api)
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    if api == "chat":
        msgs = body.get("messages") or []
        if msgs and msgs[0].get("role") in ("system", "developer"):
            cap.system_role, cap.system_prompt = msgs[0]["role"], _text(msgs[0].get("content"))
        cap.tools = [t for t in tools if isinstance(t, dict)]
    elif api == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        if isinstance(body.get("instructions"), str):
            cap.system_role, cap.system_prompt = "developer", body["instructions"]
        elif items and isinstance(items[0], dict) and items[0].get("role") == "developer":
            # Codex 0.171: the base instructions are the first developer input item
            cap.system_role, cap.system_prompt = "developer", _text(items[0].get("content"))
        cap.tools = server_tools(body)
        other = [_tool_label(t) for t in tools if isinstance(t, dict) and t.get("type") != "function"]
        if other:
            cap.notes.append(f"{len(other)} of the {len(tools)} tools sent are not function tools "
                             f"({', '.join(other)}): llama-server skips them too, it renders the "
                             f"{len(cap.tools)} function tools only")
    elif api == "gemini":  # generateContent: ``systemInstruction`` parts, ``functionDeclarations``
        si = body.get("systemInstruction")
        parts = si.get("parts") if isinstance(si, dict) else None
        if isinstance(parts, list) and parts:
            cap.system_prompt = _text(parts)
        cap.tools = gemini_tools(body)
    else:  # anthropic: ``system`` is a string or text blocks
        system = body.get("system")
        if system:
            blocks = system if isinstance(system, list) else [{"text": system}]
            # joined with nothing between, as llama-server joins them (server_chat_convert_anthropic_to_oai)
            cap.system_prompt = "".join(_text([b]) for b in blocks)
        cap.tools = [function_tool(t.get("name", ""), t.get("description"), t.get("input_schema"))
                     for t in tools if isinstance(t, dict) and "name" in t]
    return cap


def last_user_text(api: str, body: dict[str, Any]) -> str | None:
    """The last text of a request's last user message: where the agents put their summarization
    prompt (Claude Code as one more text block after a tool result, the others as a message)."""
    if api == "responses":
        msgs = [it for it in body.get("input") or [] if isinstance(it, dict) and it.get("type") == "message"]
    elif api == "gemini":
        msgs = [{"role": c.get("role"), "content": c.get("parts")} for c in body.get("contents") or []
                if isinstance(c, dict)]
    else:
        msgs = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") != "system"]
    if not msgs or msgs[-1].get("role") not in ("user", None):
        return None
    content = msgs[-1].get("content")
    if isinstance(content, str):
        return content
    texts = [b["text"] for b in content or [] if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return texts[-1] if texts else None


def compaction_of(agent: str, api: str, summarizing: dict[str, Any], conversation: dict[str, Any]) -> dict[str, Any]:
    """What a summarization request carries (``Capture.compaction``), beside one of the
    conversation's own requests of the same run: its prompt, and whether its system prompt and
    tools are the conversation's, none, or its own."""
    own, conv = from_request(agent, "", api, summarizing), from_request(agent, "", api, conversation)
    out: dict[str, Any] = {"prompt": last_user_text(api, summarizing)}
    out["system"] = ("same" if own.system_prompt == conv.system_prompt else
                     "none" if own.system_prompt is None else "own")
    if out["system"] == "own":
        out["system_prompt"], out["system_role"] = own.system_prompt, own.system_role
    out["tools"] = "same" if own.tools == conv.tools else "none" if not own.tools else "own"
    if out["tools"] == "own":
        out["own_tools"] = own.tools
    return out


def cache_path(agent: str, version: str) -> Path:
    safe = "".join(c if c.isalnum() or c in ".-_@" else "_" for c in f"{agent}@{version}")
    return agents_dir() / f"{safe}.json"


def save(cap: Capture) -> Path:
    p = cache_path(cap.agent, cap.version)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(orjson.dumps(asdict(cap), option=orjson.OPT_INDENT_2))
    return p


def personalised(cap: Capture, cwd: str | None, created: float | None,
                 home: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    """The capture's prompt and tools with the session's own working directory, HOME and date in
    place of the capture run's (the agents write them into their prompts: Qwen Code its memory
    folders, under HOME and named for the project with every non-alphanumeric character as ``-``)."""
    import datetime as _dt

    import os.path

    subs: list[tuple[str, str]] = []
    if cap.home and home and cap.project and cwd:  # Qwen Code names context files relative to the project
        rel_cap, rel_own = os.path.relpath(cap.home, cap.project), os.path.relpath(home, cwd)
        if rel_cap != rel_own:
            subs.append((rel_cap + "/", rel_own + "/"))
    if cap.project and cwd and cap.project != cwd:
        subs += [(_slug(cap.project), _slug(cwd)), (cap.project, cwd)]
    if cap.home and home and cap.home != home:
        subs.append((cap.home, home))
    if cap.date and created:
        then = _dt.datetime.strptime(cap.date, "%Y-%m-%d")
        day = _dt.datetime.fromtimestamp(created, _dt.timezone.utc)
        if day.strftime("%Y-%m-%d") != cap.date:
            subs += [(cap.date, day.strftime("%Y-%m-%d")), (_long_date(then), _long_date(day))]
    if not subs:
        return cap.system_prompt, cap.tools
    raw = orjson.dumps({"p": cap.system_prompt, "t": cap.tools}).decode()
    for old, new in subs:
        raw = raw.replace(orjson.dumps(old).decode()[1:-1], orjson.dumps(new).decode()[1:-1])
    out = orjson.loads(raw)
    return out["p"], out["t"]


def _long_date(d) -> str:
    """``Wednesday, December 2, 2026``: the date as Qwen Code's reminders write it."""
    return f"{d.strftime('%A, %B')} {d.day}, {d.year}"


def user_prefixes(cap: Capture, cwd: str | None, created: float | None,
                  home: str | None = None) -> tuple[list[str], list[str]]:
    """The send-time text parts before the first and before each later prompt, personalised."""
    probe = Capture(cap.agent, cap.version, cap.api, system_prompt=None,
                    tools=[{"first": cap.first_user_prefix, "later": cap.later_user_prefix}],
                    project=cap.project, home=cap.home, date=cap.date)
    _, tools = personalised(probe, cwd, created, home)
    return tools[0]["first"], tools[0]["later"]


def prefix_parts(body: dict[str, Any], prompt: str) -> list[str]:
    """The text parts a chat request's last user message carries before ``prompt``."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if not isinstance(content, list):
        return []
    texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return texts[:texts.index(prompt)] if prompt in texts else []


def _slug(path: str) -> str:
    """A project folder as Claude Code and Qwen Code name it (``/tmp/a_b`` → ``-tmp-a-b``)."""
    import re

    return re.sub(r"[^A-Za-z0-9]", "-", path)


def load(agent: str, version: str) -> Capture | None:
    """A capture made earlier for this agent and version, if the cache holds one."""
    p = cache_path(agent, version)
    try:
        data = orjson.loads(p.read_bytes())
        return Capture(**data)
    except (OSError, orjson.JSONDecodeError, TypeError):
        return None


def estimated_tokens(cap_or_text: Capture | str | None) -> int:
    """A rough token count (4 characters a token) of what a missing capture would have added."""
    if cap_or_text is None:
        return 0
    if isinstance(cap_or_text, str):
        return len(cap_or_text) // 4
    return (len(cap_or_text.system_prompt or "") + len(orjson.dumps(cap_or_text.tools))) // 4


def agents_dir() -> Path:
    """Where captures live (``REPLAYER_AGENTS_DIR`` for tests, else the user cache)."""
    import os

    env = os.environ.get("REPLAYER_AGENTS_DIR")
    return Path(env) if env else cache_dir() / "agents"


def load_latest(agent: str) -> Capture | None:
    """The most recently made capture of ``agent`` (any version)."""
    found = sorted(agents_dir().glob(f"{agent}@*.json"), key=lambda p: p.stat().st_mtime)
    for p in reversed(found):
        cap = load(agent, p.stem.split("@", 1)[1])
        if cap is not None:
            return cap
    return None
