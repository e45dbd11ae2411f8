"""OpenAI Codex CLI rollouts (legacy and wrapped) → chat messages.

Codex resumes by sending every stored ``response_item`` (from the last compaction's
``replacement_history`` on, minus rolled-back turns) to the Responses API with the base
instructions. For llama-server's chat endpoint the base instructions and developer/system
items fold into one leading system message; consecutive assistant items of a turn become
one assistant message with ``tool_calls``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.session.model import IMAGE_OMITTED, ImagePart, Message, Session, TextPart, ToolCall, Usage
from replayer.core.session.reader import iso_to_s, json_args, read_records

FORMAT = "codex"
WRAPPED_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted",
                 "world_state", "token_usage_record", "inter_agent_communication"}
ITEM_TYPES = {"message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
              "custom_tool_call_output", "local_shell_call", "web_search_call",
              "image_generation_call", "tool_search_call", "tool_search_output", "compaction"}


def detect(objs: list[dict[str, Any]]) -> bool:
    if not objs:
        return False
    first = objs[0]
    if first.get("type") == "session_meta" and "payload" in first:
        return True
    if "type" not in first and "id" in first and "timestamp" in first:
        return any(o.get("record_type") == "state" or o.get("type") in ITEM_TYPES for o in objs[1:])
    return False


def load(path: Path, *, images: str = "omit") -> Session:
    lines, stats, warnings = read_records(path, "Codex")
    wrapped = lines[0].get("type") == "session_meta"
    meta: dict = {}
    items: list[dict] = []
    model = None
    usage = Usage()
    if wrapped:
        for ln in lines:
            t = ln.get("type")
            p = ln.get("payload") if isinstance(ln.get("payload"), dict) else {}
            if t not in WRAPPED_TYPES:
                stats.unknown_types[str(t)] = stats.unknown_types.get(str(t), 0) + 1
            if t == "session_meta":
                meta = p
            elif t == "response_item":
                items.append(p)
            elif t == "turn_context":
                model = p.get("model") or model
            elif t == "compacted":
                stats.compactions_total += 1
                if isinstance(p.get("replacement_history"), list):
                    items = list(p["replacement_history"])
                    stats.compactions_applied = 1
                elif p.get("message"):
                    items = [{"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": p["message"]}]}]
                    stats.compactions_applied = 1
            elif t == "event_msg":
                et = p.get("type")
                if et == "thread_rolled_back":
                    items = _roll_back(items, int(p.get("num_turns") or 0))
                elif et == "token_count" and isinstance(p.get("info"), dict):
                    last = (p["info"].get("last_token_usage") or {})
                    usage = Usage(input_tokens=last.get("input_tokens"), output_tokens=last.get("output_tokens"),
                                  cache_read_tokens=last.get("cached_input_tokens"),
                                  context_tokens=last.get("input_tokens"))
    else:
        meta = lines[0]
        items = [ln for ln in lines[1:] if ln.get("record_type") != "state" and "type" in ln]
    stats.branch_length = len(items)

    base = meta.get("base_instructions")
    system_parts: list[str] = []
    system_prompt: str | None = None
    if isinstance(base, dict) and base.get("text"):
        system_parts.append(base["text"])
    elif isinstance(base, str):
        system_parts.append(base)
    messages: list[Message] = []
    acc: Message | None = None
    pending_reasoning: list[str] = []

    def flush() -> None:
        nonlocal acc
        if acc is not None:
            if acc.content is None and not acc.tool_calls:
                acc = None
                return
            messages.append(acc)
        acc = None

    def assistant() -> Message:
        nonlocal acc
        if acc is None:
            acc = Message(role="assistant")
            if pending_reasoning:
                acc.reasoning = "\n".join(pending_reasoning)
                pending_reasoning.clear()
        return acc

    for it in items:
        t = it.get("type")
        if t == "message":
            role = it.get("role")
            text_parts, image_parts = _content(it.get("content"), images)
            if role in ("developer", "system"):
                flush()
                if not messages and acc is None:
                    system_parts.append("\n".join(p.text for p in text_parts))
                else:  # a later developer block: most templates allow one leading system only
                    messages.append(Message(role="user", content="\n".join(p.text for p in text_parts),
                                            origin="developer"))
            elif role == "assistant":
                a = assistant()
                text = "".join(p.text for p in text_parts)
                a.content = (a.content or "") + text if text else a.content
            else:
                flush()
                parts = text_parts + image_parts
                if len(parts) == 1 and isinstance(parts[0], TextPart):
                    messages.append(Message(role="user", content=parts[0].text))
                elif parts:
                    messages.append(Message(role="user", content=parts))
        elif t == "reasoning":
            texts = [c.get("text", "") for c in it.get("content") or [] if isinstance(c, dict)
                     and c.get("type") == "reasoning_text"]
            if not texts:
                texts = [s.get("text", "") for s in it.get("summary") or [] if isinstance(s, dict)]
            texts = [t for t in texts if t]
            if texts:
                if acc is not None and not acc.tool_calls and acc.content is None:
                    acc.reasoning = "\n".join(filter(None, [acc.reasoning, *texts]))
                else:
                    flush()
                    pending_reasoning.extend(texts)
        elif t in ("function_call", "custom_tool_call", "local_shell_call"):
            a = assistant()
            cid = str(it.get("call_id") or it.get("id") or f"call_{len(messages)}")
            if t == "function_call":
                name = it.get("name", "")
                if it.get("namespace"):
                    name = f"{it['namespace']}.{name}"
                args = json_args(it.get("arguments", "{}"))
            elif t == "custom_tool_call":
                name, args = it.get("name", ""), json_args({"input": it.get("input", "")})
            else:
                name = "shell"
                args = json_args({"command": (it.get("action") or {}).get("command", [])})
            a.tool_calls.append(ToolCall(id=cid, name=name, arguments=args))
        elif t in ("function_call_output", "custom_tool_call_output"):
            flush()
            out = it.get("output")
            if isinstance(out, dict):
                out = out.get("content") or out.get("output") or ""
            if isinstance(out, list):
                out = "\n".join(c.get("text", "") for c in out if isinstance(c, dict) and "text" in c)
            messages.append(Message(role="tool", content=str(out if out is not None else ""),
                                    tool_call_id=str(it.get("call_id", ""))))
        elif t not in ITEM_TYPES:
            stats.unknown_types[f"item:{t}"] = stats.unknown_types.get(f"item:{t}", 0) + 1
    flush()
    if system_parts:
        system_prompt = "\n\n".join(p for p in system_parts if p)
    if not (isinstance(base, (dict, str)) and base):
        warnings.append("this rollout does not store Codex's base instructions")
    return Session(
        format=FORMAT, format_version="wrapped" if wrapped else "legacy",
        agent_version=meta.get("cli_version"), path=str(path),
        session_id=meta.get("id") or meta.get("session_id"), cwd=meta.get("cwd"),
        provider=meta.get("model_provider"), model=model, created=iso_to_s(meta.get("timestamp")),
        updated=iso_to_s(lines[-1].get("timestamp")), messages=messages,
        system_prompt=system_prompt if isinstance(base, (dict, str)) and base else None,
        tools=None, usage=usage, stats=stats, warnings=warnings,
    )


def _content(content: Any, images: str) -> tuple[list[TextPart], list]:
    texts: list[TextPart] = []
    imgs: list = []
    if isinstance(content, str):
        return [TextPart(text=content)], []
    for c in content or []:
        if not isinstance(c, dict):
            continue
        if c.get("type") in ("input_text", "output_text", "text"):
            texts.append(TextPart(text=c.get("text", "")))
        elif c.get("type") == "input_image":
            if images == "keep":
                imgs.append(ImagePart())
            else:
                imgs.append(TextPart(text=IMAGE_OMITTED))
    return texts, imgs


def _roll_back(items: list[dict], n: int) -> list[dict]:
    """Drop the last ``n`` user turns (a user message and everything after it)."""
    for _ in range(n):
        idx = max((i for i, it in enumerate(items) if it.get("type") == "message"
                   and it.get("role") == "user"), default=None)
        if idx is None:
            break
        items = items[:idx]
    return items
