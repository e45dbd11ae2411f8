"""OpenAI Codex CLI rollouts (legacy and wrapped) → chat messages.

Codex resumes by sending every stored ``response_item`` (from the last compaction's
``replacement_history`` on, minus rolled-back turns) to the Responses API with the base
instructions. The items a compaction replaced stay in the rollout: they are the history each
request before it was sent with (``Session.earlier``), and the summarization request after
them (that history and Codex's own prompt, in its binary: from a capture; ``summarize``).
Codex 0.171 sends the base instructions as the first ``developer`` input item and each stored
developer item as one more (so they stay ``developer`` messages here, not
folded, not ``user``); consecutive assistant items of a turn become one assistant message
with ``tool_calls``. The stored ``base_instructions`` are longer than what is sent (Codex
drops sections for tools it does not offer): a capture of the agent replaces them.

A call of a tool inside a ``namespace`` tool (``multi_agent_v1.spawn_agent``) is stored with
its ``namespace`` beside its ``name``; llama-server reads ``name`` only (b9859
tools/server/server-chat.cpp:163-176), so the call keeps the bare name. Each subagent that
``spawn_agent`` starts writes a rollout of its own (``session_meta.parent_thread_id`` is the
parent's id); ``children`` finds them from the spawn results the parent stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.core.session.model import (
    EarlierHistory, ImportStats, Message, Session, Summarization, TextPart, ToolCall, Usage, image_part,
)
from replayer.core.session.reader import iso_to_s, json_args, read_records
from replayer.core.session.registry import Head, Importer, is_one_of, jsonl_confidence, mostly

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
        return any(o.get("record_type") == "state" or is_one_of(o.get("type"), ITEM_TYPES) for o in objs[1:])
    return _wrapped_without_meta(objs)


def _is_wrapped(o: dict[str, Any]) -> bool:
    return is_one_of(o.get("type"), WRAPPED_TYPES) and isinstance(o.get("payload"), dict)


def _wrapped_without_meta(objs: list[dict[str, Any]]) -> bool:
    """A wrapped rollout whose ``session_meta`` line is damaged or lost: the records after it say so."""
    rest = objs[1:] if objs and not _is_wrapped(objs[0]) else objs
    return sum(map(_is_wrapped, rest)) >= 2 and mostly(rest, _is_wrapped)


def load(path: Path, *, images: str = "omit") -> Session:
    """Records → the active items (after compactions and roll-backs) → messages → a ``Session``."""
    lines, stats, warnings = read_records(path, "Codex")
    wrapped = lines[0].get("type") == "session_meta"
    if not wrapped and _wrapped_without_meta(lines):
        wrapped = True
        warnings.append(f"the first record is not the session_meta (its type is {str(lines[0].get('type'))[:40]!r}): "
                        "no session id, cwd or base instructions from it")
    times: dict[int, float | None] = {}
    before: list[list[dict]] = []
    summaries: list[tuple[list[dict], float | None]] = []
    if wrapped:
        meta, items, model, usage = _read_wrapped(lines, stats, times, before, summaries)
    else:
        meta, model, usage = lines[0], None, Usage()
        items = [ln for ln in lines[1:] if ln.get("record_type") != "state" and "type" in ln]
    stats.branch_length = len(items)
    base = meta.get("base_instructions")
    has_base = isinstance(base, (dict, str)) and bool(base)
    system_parts = [base["text"]] if isinstance(base, dict) and base.get("text") else [base] if isinstance(base, str) else []
    turns = _converted(items, images, system_parts, times, stats)
    # the history each compaction replaced, as Codex sent it then: its requests are turns too
    earlier = [_history(h, reply, when, images, system_parts, times)
               for h, (reply, when) in zip(before, summaries)]
    if not has_base:
        warnings.append("this rollout does not store Codex's base instructions")
    return Session(
        format=FORMAT, format_version="wrapped" if wrapped else "legacy",
        agent_version=meta.get("cli_version"), path=str(path),
        session_id=meta.get("id") or meta.get("session_id"), cwd=meta.get("cwd"),
        provider=meta.get("model_provider"), model=model, created=iso_to_s(meta.get("timestamp")),
        updated=iso_to_s(lines[-1].get("timestamp")), messages=turns.messages,
        system_prompt=turns.system_prompt() if has_base else None, system_role="developer",
        tools=None, usage=usage, stats=stats, warnings=warnings, earlier=earlier,
    )


def _history(items: list[dict], reply: list[dict], when: float | None, images: str, system_parts: list[str],
             times: dict[int, float | None]) -> EarlierHistory:
    """The history a compaction replaced, as Codex sent it then, and its summarization request:
    that whole history, then Codex's summarization prompt (in its binary: from a capture) as a
    user message, with the conversation's developer items and no tools; its reply the summary."""
    msgs = _converted(items, images, system_parts, times, ImportStats()).messages
    answer = [m for m in _converted(reply, images, system_parts, times, ImportStats()).messages
              if m.role == "assistant"]
    return EarlierHistory(messages=msgs, summarization=Summarization(
        upto=len(msgs), reply=answer[0] if answer else None, timestamp=when))


def _converted(items: list[dict], images: str, system_parts: list[str], times: dict[int, float | None],
               stats: ImportStats) -> "_Turns":
    """Response items as the messages Codex sends for them."""
    turns = _Turns(images, system_parts)
    for it in items:
        turns.when = times.get(id(it))
        turns.add(it, stats)
    turns.flush()
    return turns


def _read_wrapped(lines: list[dict], stats: ImportStats, times: dict[int, float | None],
                  before: list[list[dict]], summaries: list[tuple[list[dict], float | None]]
                  ) -> tuple[dict, list[dict], str | None, Usage]:
    """A wrapped rollout's meta, active items, model and last usage, replaying compactions and
    roll-backs; ``times`` gets each stored item's record time (by ``id``: when a response arrived,
    which puts a subagent's requests between the parent's), ``before`` the active items just
    before each compaction that replaced them, oldest first, and ``summaries`` each one's
    summarization reply (the items recorded after that history) with the compaction's time."""
    meta: dict = {}
    items: list[dict] = []
    model = None
    usage = Usage()
    for ln in lines:
        t = ln.get("type")
        p = ln.get("payload") if isinstance(ln.get("payload"), dict) else {}
        if not is_one_of(t, WRAPPED_TYPES):
            stats.count_unknown(t)
        if t == "session_meta":
            meta = p
        elif t == "response_item":
            items.append(p)
            times[id(p)] = iso_to_s(ln.get("timestamp"))
        elif t == "turn_context":
            model = p.get("model") or model
        elif t == "compacted":
            replaced = _compacted(p, items, stats)
            if replaced is not items:
                before.append(_without_summary(items, p.get("message")))
                summaries.append((items[len(before[-1]):], iso_to_s(ln.get("timestamp"))))
            items = replaced
        elif t == "event_msg":
            et = p.get("type")
            if et == "thread_rolled_back":
                items = _roll_back(items, int(p.get("num_turns") or 0))
            elif et == "token_count" and isinstance(p.get("info"), dict):
                last = (p["info"].get("last_token_usage") or {})
                usage = Usage(input_tokens=last.get("input_tokens"), output_tokens=last.get("output_tokens"),
                              cache_read_tokens=last.get("cached_input_tokens"),
                              context_tokens=last.get("input_tokens"))
    return meta, items, model, usage


def _compacted(p: dict, items: list[dict], stats: ImportStats) -> list[dict]:
    """The items after a compaction: its replacement history, or its summary as one user message."""
    stats.compactions_total += 1
    if isinstance(p.get("replacement_history"), list):
        stats.compactions_applied = 1
        return list(p["replacement_history"])
    if p.get("message"):
        stats.compactions_applied = 1
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": p["message"]}]}]
    return items


def _without_summary(items: list[dict], message: Any) -> list[dict]:
    """The items before a compaction without the summarization's reply: Codex 0.171 records the
    summary as an assistant item (with its reasoning) before the ``compacted`` record, whose
    ``message`` is its handoff prefix and that summary; it answered the summarization request,
    not the history (a compaction within a turn writes it right after the tool output)."""
    if not isinstance(message, str) or not message:
        return items
    end = len(items)
    while end and items[end - 1].get("type") == "message" and items[end - 1].get("role") == "assistant" \
            and (text := "".join(p.text for p in _content(items[end - 1].get("content"), "omit")[0])) \
            and text in message:
        end -= 1
    if end == len(items):
        return items
    while end and items[end - 1].get("type") == "reasoning":
        end -= 1
    return items[:end]


class _Turns:
    """Response items → messages: an assistant turn gathers its text, reasoning and tool calls."""

    def __init__(self, images: str, system_parts: list[str]) -> None:
        self.images = images
        self.system_parts = system_parts
        self.messages: list[Message] = []
        self.acc: Message | None = None
        self.pending_reasoning: list[str] = []
        self.when: float | None = None  # the time of the item being added

    def system_prompt(self) -> str | None:
        return "\n\n".join(p for p in self.system_parts if p) if self.system_parts else None

    def flush(self) -> None:
        if self.acc is not None and (self.acc.content is not None or self.acc.tool_calls):
            self.messages.append(self.acc)
        self.acc = None

    def assistant(self) -> Message:
        if self.acc is None:
            self.acc = Message(role="assistant", timestamp=self.when)
            if self.pending_reasoning:
                self.acc.reasoning = "\n".join(self.pending_reasoning)
                self.pending_reasoning.clear()
        return self.acc

    def add(self, it: dict, stats: ImportStats) -> None:
        t = it.get("type")
        if t == "message":
            self.message(it)
        elif t == "reasoning":
            self.reasoning(it)
        elif t in ("function_call", "custom_tool_call", "local_shell_call"):
            self.tool_call(it, t)
        elif t in ("function_call_output", "custom_tool_call_output"):
            self.tool_output(it)
        elif not is_one_of(t, ITEM_TYPES):
            stats.count_unknown(f"item:{t}")

    def message(self, it: dict) -> None:
        role = it.get("role")
        text_parts, image_parts = _content(it.get("content"), self.images)
        if role in ("developer", "system"):
            # sent as its own input item after the base instructions (Codex 0.171: permissions,
            # skills), so kept as one message of that role, not folded into the prompt
            self.flush()
            self.messages.append(Message(role=role, content="\n".join(p.text for p in text_parts),
                                         origin="developer"))
        elif role == "assistant":
            a = self.assistant()
            text = "".join(p.text for p in text_parts)
            a.content = (a.content or "") + text if text else a.content
        else:
            self.flush()
            parts = text_parts + image_parts
            if len(parts) == 1 and isinstance(parts[0], TextPart):
                self.messages.append(Message(role="user", content=parts[0].text))
            elif parts:
                self.messages.append(Message(role="user", content=parts))

    def reasoning(self, it: dict) -> None:
        texts = [c.get("text", "") for c in it.get("content") or [] if isinstance(c, dict)
                 and c.get("type") == "reasoning_text"]
        if not texts:
            texts = [s.get("text", "") for s in it.get("summary") or [] if isinstance(s, dict)]
        texts = [t for t in texts if t]
        if not texts:
            return
        acc = self.acc
        if acc is not None and not acc.tool_calls and acc.content is None:
            acc.reasoning = "\n".join(filter(None, [acc.reasoning, *texts]))
        else:
            self.flush()
            self.pending_reasoning.extend(texts)

    def tool_call(self, it: dict, t: str) -> None:
        a = self.assistant()
        cid = str(it.get("call_id") or it.get("id") or f"call_{len(self.messages)}")
        if t == "function_call":
            name = it.get("name", "")  # a namespace tool's call as the server renders it: its name only
            args = json_args(it.get("arguments", "{}"))
        elif t == "custom_tool_call":
            name, args = it.get("name", ""), json_args({"input": it.get("input", "")})
        else:
            name = "shell"
            args = json_args({"command": (it.get("action") or {}).get("command", [])})
        a.tool_calls.append(ToolCall(id=cid, name=name, arguments=args))

    def tool_output(self, it: dict) -> None:
        self.flush()
        out = it.get("output")
        if isinstance(out, dict):
            out = out.get("content") or out.get("output") or ""
        if isinstance(out, list):
            out = "\n".join(c.get("text", "") for c in out if isinstance(c, dict) and "text" in c)
        self.messages.append(Message(role="tool", content=str(out if out is not None else ""),
                                     tool_call_id=str(it.get("call_id", ""))))


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
            imgs.append(image_part(images))
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


def spawned(path: Path) -> list[str]:
    """The thread ids of the subagents the rollout at ``path`` started, in order: the receivers of
    its ``spawn_agent`` calls (``CollabAgentToolCall`` events), else the ``agent_id`` of each
    spawn result."""
    records, _, _ = read_records(path, "Codex")
    found: list[str] = []
    calls: set[str] = set()
    for r in records:
        p = r.get("payload") if isinstance(r.get("payload"), dict) else {}
        item = p.get("item") if isinstance(p.get("item"), dict) else {}
        if p.get("type") == "item_completed" and item.get("type") == "CollabAgentToolCall" \
                and item.get("tool") == "spawn_agent":
            found += [str(x) for x in item.get("receiver_thread_ids") or [] if str(x) not in found]
        elif p.get("type") == "function_call" and p.get("name") == "spawn_agent":
            calls.add(str(p.get("call_id")))
        elif p.get("type") == "function_call_output" and str(p.get("call_id")) in calls:
            try:
                agent_id = orjson.loads(p.get("output") or "{}").get("agent_id")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if agent_id and str(agent_id) not in found:
                found.append(str(agent_id))
    return found


def children(path: Path, session_id: str | None) -> list[tuple[str, Path]]:
    """(thread id, rollout) of the subagents the rollout at ``path`` started, and of theirs, in the
    order they were started: ``rollout-<time>-<thread id>.jsonl`` in the sessions tree
    (``sessions/YYYY/MM/DD``, a child's day may be later than its parent's) or beside the
    parent, whose ``session_meta.parent_thread_id`` is the parent's id."""
    if not session_id:
        return []
    root = path.parents[3] if len(path.parents) > 3 and path.parent.name.isdigit() else None
    out: list[tuple[str, Path]] = []
    for tid in spawned(path):
        found = sorted(path.parent.glob(f"rollout-*{tid}.jsonl")) or (
            sorted(root.glob(f"*/*/*/rollout-*{tid}.jsonl")) if root is not None else [])
        for f in found[:1]:
            if _parent_of(f) == session_id:
                out += [(tid, f), *children(f, tid)]
    return out


def _parent_of(path: Path) -> str | None:
    """The ``parent_thread_id`` of a rollout's ``session_meta`` (its first line)."""
    try:
        with path.open("rb") as fh:
            head = orjson.loads(fh.readline(1 << 24) or b"{}")
    except (OSError, orjson.JSONDecodeError):
        return None
    p = head.get("payload") if isinstance(head, dict) and isinstance(head.get("payload"), dict) else {}
    return str(p["parent_thread_id"]) if p.get("parent_thread_id") else None


def detect_head(head: Head) -> float:
    return jsonl_confidence(head, detect, 0.91)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images))
