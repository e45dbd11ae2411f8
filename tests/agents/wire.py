"""The requests an agent sent, and replayer's rebuild of them, in one comparable shape.

Each wire request is reduced to what a chat template reads: per message its role, text,
reasoning, tool calls (name, parsed arguments, id) and tool-result id, plus the system prompt
and tool names. Only the comparison uses this reduction; it is not replayer's conversion of
Responses or Anthropic bodies (the record proxy owns that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Req:
    system: str | None
    system_role: str | None
    tools: list[str]
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: each tool's definition as a chat template reads it (name, description, parameters and any
    #: other field the server keeps), in order
    tool_defs: list[dict[str, Any]] = field(default_factory=list)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for b in content:
        if isinstance(b, dict) and isinstance(b.get("text"), str):
            out.append(b["text"])
        elif isinstance(b, dict) and b.get("type") in ("image", "image_url", "input_image"):
            out.append("<image>")
    return "\n".join(out)


def _args(a: Any) -> Any:
    if isinstance(a, str):
        try:
            return json.loads(a)
        except ValueError:
            return a
    return a


def _msg(role: str, text: str = "", **kw: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"role": role, "text": text}
    m.update({k: v for k, v in kw.items() if v})
    return m


def from_chat(body: dict[str, Any]) -> Req:
    msgs = list(body.get("messages") or [])
    system = role = None
    if msgs and msgs[0].get("role") in ("system", "developer"):
        role, system = msgs[0]["role"], _text(msgs[0].get("content"))
        msgs = msgs[1:]
    out = []
    for m in msgs:
        calls = [{"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                  "args": _args((c.get("function") or {}).get("arguments"))} for c in m.get("tool_calls") or []]
        out.append(_msg(m.get("role", ""), _text(m.get("content")),
                        reasoning=m.get("reasoning_content") or m.get("reasoning"), calls=calls,
                        call_id=m.get("tool_call_id")))
    names = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
    return Req(system, role, names, out, [t.get("function") or {} for t in body.get("tools") or []])


def from_responses(body: dict[str, Any]) -> Req:
    items = body.get("input") or []
    system, role = body.get("instructions"), "developer" if body.get("instructions") else None
    if system is None and items and items[0].get("type") == "message" and items[0].get("role") == "developer":
        system, role, items = _text(items[0].get("content")), "developer", items[1:]
    out: list[dict[str, Any]] = []
    reasoning: list[str] = []
    cur: dict[str, Any] | None = None
    for it in items:
        t = it.get("type")
        if t == "reasoning":
            reasoning += [s.get("text", "") for s in it.get("summary") or []]
            continue
        if t == "function_call" or (t == "message" and it.get("role") == "assistant"):
            if cur is None:
                cur = _msg("assistant", reasoning="\n".join(reasoning) or None)
                cur.setdefault("text", "")
                out.append(cur)
                reasoning = []
            if t == "function_call":
                cur.setdefault("calls", []).append({"id": it.get("call_id"), "name": it.get("name"),
                                                    "args": _args(it.get("arguments"))})
            else:
                cur["text"] += _text(it.get("content"))
            continue
        cur = None
        if t == "function_call_output":
            out.append(_msg("tool", _text(it.get("output")) if not isinstance(it.get("output"), str)
                            else it["output"], call_id=it.get("call_id")))
        elif t == "message":
            out.append(_msg(it.get("role", ""), _text(it.get("content"))))
    # llama-server renders the function tools only ("unsupported Responses tool type … skipped")
    fns = [{k: v for k, v in t.items() if k != "type"} for t in body.get("tools") or [] if t.get("type") == "function"]
    return Req(system, role, [t.get("name") for t in fns], out, fns)


def from_anthropic(body: dict[str, Any]) -> Req:
    system = body.get("system")
    if isinstance(system, list):  # as llama-server joins the blocks: nothing between them
        system = "".join(b.get("text", "") for b in system)
    out = []
    for m in body.get("messages") or []:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if m.get("role") == "assistant":
            calls = [{"id": b.get("id"), "name": b.get("name"), "args": b.get("input")}
                     for b in blocks if b.get("type") == "tool_use"]
            out.append(_msg("assistant", "\n\n".join(b.get("text", "") for b in blocks if b.get("type") == "text"),
                            reasoning="\n".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking"),
                            calls=calls))
            continue
        if m.get("role") == "system":
            out.append(_msg("system", "\n".join(_text([b]) for b in blocks)))
            continue
        texts = []
        for b in blocks:
            if b.get("type") == "tool_result":
                out.append(_msg("tool", _text(b.get("content")), call_id=b.get("tool_use_id")))
            elif b.get("type") in ("text", "image"):
                texts.append(_text([b]))
        if texts:
            out.append(_msg("user", "\n".join(texts)))
    defs = [{"name": t.get("name"), "description": t.get("description"), "parameters": t.get("input_schema")}
            for t in body.get("tools") or []]
    return Req(system if system else None, "system" if system else None,
               [t.get("name") for t in body.get("tools") or []], out, defs)


def _response_text(resp: Any) -> str:
    if isinstance(resp, dict):
        for k in ("output", "content", "result", "error"):
            if isinstance(resp.get(k), str):
                return resp[k]
    return json.dumps(resp, separators=(",", ":"))


def from_gemini(body: dict[str, Any]) -> Req:
    """A generateContent body: model turns as assistant messages (their thought parts as
    reasoning), function responses as tool messages, the other parts of a user turn as one user
    message (its text parts joined by newlines, as ``_text`` joins a chat message's parts)."""
    from replayer.core.agents.capture import gemini_tools

    si = body.get("systemInstruction")
    system = _text((si or {}).get("parts")) if isinstance(si, dict) and si.get("parts") else None
    out: list[dict[str, Any]] = []
    for c in body.get("contents") or []:
        parts = [p for p in c.get("parts") or [] if isinstance(p, dict)]
        if c.get("role") == "model":
            calls = [{"id": p["functionCall"].get("id"), "name": p["functionCall"].get("name"),
                      "args": p["functionCall"].get("args")} for p in parts if "functionCall" in p]
            out.append(_msg("assistant", "".join(p["text"] for p in parts if "text" in p and not p.get("thought")),
                            reasoning="".join(p["text"] for p in parts if "text" in p and p.get("thought")),
                            calls=calls))
            continue
        for p in parts:
            if "functionResponse" in p:
                fr = p["functionResponse"]
                out.append(_msg("tool", _response_text(fr.get("response")), call_id=fr.get("id")))
        texts = [p for p in parts if "text" in p or "inlineData" in p]
        if texts:
            out.append(_msg("user", "\n".join(p["text"] if "text" in p else "<image>" for p in texts)))
    defs = [t["function"] for t in gemini_tools(body)]
    return Req(system, "system" if system else None, [d["name"] for d in defs], out, defs)


FROM = {"chat": from_chat, "responses": from_responses, "anthropic": from_anthropic, "gemini": from_gemini}


def diff(rebuilt: Req, sent: Req, *, reasoning: bool = True) -> list[str]:
    """What differs, one line each ("" lists nothing when the rebuild is the request)."""
    out = []
    if rebuilt.system != sent.system:
        out.append(f"system prompt: {len(rebuilt.system or '')} vs {len(sent.system or '')} characters sent")
    elif rebuilt.system_role != sent.system_role:
        out.append(f"system role: {rebuilt.system_role} vs {sent.system_role} sent")
    if rebuilt.tools != sent.tools:
        out.append(f"tools: {len(rebuilt.tools)} vs {len(sent.tools)} sent "
                   f"(only rebuilt {sorted(set(rebuilt.tools) - set(sent.tools))[:5]}, "
                   f"only sent {sorted(set(sent.tools) - set(rebuilt.tools))[:5]})")
    elif rebuilt.tool_defs != sent.tool_defs:
        out.append("tool definitions: " + ", ".join(
            f"{a.get('name')} ({sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))})"
            for a, b in zip(rebuilt.tool_defs, sent.tool_defs) if a != b))
    a, b = rebuilt.messages, sent.messages
    if not reasoning:
        a = [{k: v for k, v in m.items() if k != "reasoning"} for m in a]
        b = [{k: v for k, v in m.items() if k != "reasoning"} for m in b]
    if len(a) != len(b):
        out.append(f"messages: {len(a)} vs {len(b)} sent ({[m['role'] for m in a]} vs {[m['role'] for m in b]})")
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            out.append(f"message {k}: {json.dumps(x)[:300]} vs sent {json.dumps(y)[:300]}")
            break
    return out


def main_thread(agent, log: list) -> tuple[list, list]:
    """The conversation's own requests: same system prompt and tools as the first one with tools."""
    first = next((r for r in log if r.body.get("tools")), None)
    if first is None:
        return [], log
    key = FROM[agent.api](first.body)
    main, other = [], []
    for r in log:
        q = FROM[agent.api](r.body) if r.path.endswith(("/chat/completions", "/responses", "/messages",
                                                         ":streamGenerateContent", ":generateContent")) else None
        (main if q is not None and q.tools == key.tools and q.system == key.system else other).append(r)
    return main, other
