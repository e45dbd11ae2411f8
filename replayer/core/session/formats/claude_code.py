"""Claude Code transcripts (``~/.claude/projects/<cwd>/<id>.jsonl``) → chat messages.

The active thread is the ``parentUuid`` chain from the newest main-chain record; a
``compact_boundary`` has no parent, so the walk stops there and the ``isCompactSummary``
user message that follows carries the history. Assistant responses are written one
content block per line and are merged back by ``message.id`` — all records of that id,
also those off the walked chain (2.x writes parallel ``tool_use`` blocks and their
``tool_result`` records on sibling branches); every result of a turn's calls follows it,
in file order, as Claude Code sends them on resume. Sidechains (1.0.x Task subagents) are
not on the main thread: ``sidechains`` gives each as a thread of its own. Claude Code
stores neither system prompt nor tool schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.formats import claude_wire
from replayer.core.session.formats.claude_blocks import assistant_message, blocks, text_of, user_messages
from replayer.core.session.formats.claude_sidechains import CONVERSATIONAL, sidechains
from replayer.core.session.branch import path_to_root
from replayer.core.session.model import EarlierHistory, ImportStats, Message, Session, Summarization, TextPart, Usage
from replayer.core.session.reader import JsonlFile, iso_to_s, read_records
from replayer.core.session.registry import Head, Importer, is_one_of, jsonl_confidence

FORMAT = "claude-code"
KNOWN = CONVERSATIONAL | {
    "summary", "file-history-snapshot", "queue-operation", "last-prompt", "cost-state",
    "atis-latch", "custom-title", "tag", "agent-name", "pr-link", "progress", "hive-mind-meta",
}


def detect(objs: list[dict[str, Any]]) -> bool:
    hits = 0
    for o in objs:
        if o.get("_type") == "hive-mind-meta":
            hits += 1
        elif "sessionId" in o and ("uuid" in o or "parentUuid" in o) and is_one_of(o.get("type"), KNOWN):
            hits += 1
        elif is_one_of(o.get("type"), ("summary", "file-history-snapshot", "queue-operation")) and (
                "leafUuid" in o or "messageId" in o or "operation" in o):
            hits += 1
    return hits > 0 and any("sessionId" in o or "uuid" in o for o in objs)


def load(path: Path, *, images: str = "omit", thread: str | None = None, once: JsonlFile | None = None) -> Session:
    """Claude Code's resume, in stages: index the records, walk the active thread, gather each
    response's blocks and results from the whole thread, then turn the thread into messages.
    ``thread``: the root uuid of one of the file's sidechains (``sidechains``), read instead of
    the main thread; ``once``: the file parsed already (its sidechains read it one by one)."""
    records, stats, warnings = read_records(path, "Claude Code", once)
    if thread is not None:
        records = sidechains(records).get(thread)
        if records is None:
            raise ImportFailed(f"{path} holds no sidechain starting at {thread!r}")
    by_uuid = _index(records, stats)
    main = _thread(records, path, warnings)
    chain = path_to_root(main[-1], by_uuid, id_key="uuid", parent_key="parentUuid")
    stats.branch_length = len(chain)
    if chain and chain[0].get("type") == "system" and chain[0].get("subtype") == "compact_boundary":
        stats.compactions_applied = 1
    chain, n_kept = _with_preserved(chain, by_uuid, stats)
    transcript = _Transcript(_responses(main, chain), stats, images).read(chain)
    transcript.messages = _send_shape(transcript.messages, stats, warnings)
    session = _session(path, records, by_uuid, chain, transcript, warnings)
    sent = claude_wire.read(records)
    if sent is not None:
        _as_sent(session, sent, records, images)
        _put_billing_header(session, records, chain)
    session.compacted_prefix = _after_responses(session.messages, n_kept)
    if thread is None:
        session.earlier = _earlier(records, by_uuid, main, images)
    return session


def _earlier(records: list[dict], by_uuid: dict[str, dict], main: list[dict], images: str) -> list[EarlierHistory]:
    """The conversation as Claude Code last sent it before each compaction, oldest first. The
    records before a ``compact_boundary`` stay in the transcript (its ``logicalParentUuid`` is
    where the old thread ended): they are read as the thread after it is, from the
    ``api-request`` records written before the boundary where there are some, each with its own
    prompt (the billing header fingerprints the first prompt, not the summary)."""
    out: list[EarlierHistory] = []
    for pos, b in enumerate(records):
        leaf = by_uuid.get(b.get("logicalParentUuid"))
        if b.get("subtype") != "compact_boundary" or b.get("isSidechain") or leaf is None:
            continue
        stats = ImportStats()
        chain, n_kept = _with_preserved(path_to_root(leaf, by_uuid, id_key="uuid", parent_key="parentUuid"),
                                        by_uuid, stats)
        transcript = _Transcript(_responses(main, chain), stats, images).read(chain)
        s = Session(format=FORMAT, path="", agent_version=transcript.version,
                    messages=_send_shape(transcript.messages, stats, []))
        sent = claude_wire.read(records[:pos])
        if sent is not None:
            _as_sent(s, sent, records[:pos], images)
            _put_billing_header(s, records[:pos], chain)
        if s.messages:
            out.append(EarlierHistory(messages=s.messages, system_prompt=s.system_prompt, tools=s.tools,
                                      compacted_prefix=_after_responses(s.messages, n_kept),
                                      summarization=_summarization(b, records[pos + 1:], by_uuid, main, s.messages,
                                                                   images)))
    return out


def _summarization(boundary: dict, after: list[dict], by_uuid: dict[str, dict], main: list[dict],
                   history: list[Message], images: str) -> Summarization:
    """Claude Code's summarization request at ``boundary``: the history it last sent without
    the stretch the compaction keeps verbatim after the summary (``preservedSegment``: "the
    summary was written without seeing them"), then its prompt (its code: from a capture), with
    the conversation's own system prompt and tools. Its reply is the summary record that follows
    the boundary; it was sent ``compactMetadata.durationMs`` before the boundary was written."""
    meta = boundary.get("compactMetadata") if isinstance(boundary.get("compactMetadata"), dict) else {}
    kept = _preserved_messages(meta.get("preservedSegment"), by_uuid, main, images)
    summary = next((r for r in after if r.get("isCompactSummary") and r.get("parentUuid") == boundary.get("uuid")),
                   None)
    reply = None
    if summary is not None:
        msg = summary.get("message") if isinstance(summary.get("message"), dict) else {}
        reply = Message(role="assistant", content=text_of(msg.get("content")), origin="compaction_summary")
    when = iso_to_s(boundary.get("timestamp"))
    took = meta.get("durationMs")
    if when is not None and isinstance(took, (int, float)) and not isinstance(took, bool) and 0 <= took < 1e9:
        when -= took / 1000
    return Summarization(upto=max(0, len(history) - kept), reply=reply, timestamp=when)


def _preserved_messages(seg: Any, by_uuid: dict[str, dict], main: list[dict], images: str) -> int:
    """How many of the messages sent last before a compaction are its preserved segment (the
    records ``headUuid`` … ``tailUuid``, the end of the old thread), in their sent shape."""
    if not isinstance(seg, dict) or not isinstance(seg.get("tailUuid"), str) or seg["tailUuid"] not in by_uuid:
        return 0
    kept = path_to_root(by_uuid[seg["tailUuid"]], by_uuid, id_key="uuid", parent_key="parentUuid")
    head = next((k for k, r in enumerate(kept) if r.get("uuid") == seg.get("headUuid")), None)
    if head is None:
        return 0
    stats = ImportStats()
    return len(_send_shape(_Transcript(_responses(main, kept[head:]), stats, images).read(kept[head:]).messages,
                           stats, []))


def _after_responses(messages: list[Message], n: int) -> int:
    """The index just past the start of the ``n``-th response (0 for none): the responses a
    compaction kept after its summary answered the history before it."""
    starts = [i for i, m in enumerate(messages)
              if m.role == "assistant" and (i == 0 or messages[i - 1].role != "assistant")]
    return starts[n - 1] + 1 if 0 < n <= len(starts) else 0


def _put_billing_header(session: Session, records: list[dict], chain: list[dict]) -> None:
    """The billing header Claude Code sends as its first system block, rebuilt from the
    transcript: the version, the entrypoint and a fingerprint of the first prompt."""
    subagent = not any(not r.get("isSidechain") for r in records if r.get("type") in ("user", "assistant"))
    thread = [r for r in (records if subagent else chain) if r.get("type") in ("user", "assistant")]
    entry = next((r["entrypoint"] for r in reversed(thread) if isinstance(r.get("entrypoint"), str)), None)
    if (session.system_prompt or "").startswith(claude_wire.BILLING):
        return
    if not (session.agent_version and entry):
        session.warnings.append("the billing header Claude Code sends before its prompt (~25 tokens) could not be "
                                "rebuilt: the transcript names no version or entrypoint")
        return
    session.system_prompt = claude_wire.billing_header(
        session.agent_version, entry, claude_wire.first_prompt(thread), subagent=subagent) + (session.system_prompt or "")


def _with_preserved(chain: list[dict], by_uuid: dict[str, dict], stats: ImportStats) -> tuple[list[dict], int]:
    """A partial compaction keeps a stretch of the old history (``compactMetadata.preservedSegment``:
    ``headUuid`` … ``tailUuid``) after its summary; the new thread does not link to it, so it is
    put back after the summary, as Claude Code sends it. Also how many responses it holds."""
    if not chain or chain[0].get("subtype") != "compact_boundary":
        return chain, 0
    seg = (chain[0].get("compactMetadata") or {}).get("preservedSegment")
    if not isinstance(seg, dict) or not isinstance(seg.get("tailUuid"), str) or seg["tailUuid"] not in by_uuid:
        return chain, 0
    kept = path_to_root(by_uuid[seg["tailUuid"]], by_uuid, id_key="uuid", parent_key="parentUuid")
    head = next((k for k, r in enumerate(kept) if r.get("uuid") == seg.get("headUuid")), 0)
    kept = [r for r in kept[head:] if r.get("uuid") not in {c.get("uuid") for c in chain}]
    if not kept:
        return chain, 0
    at = next((k + 1 for k, r in enumerate(chain) if r.get("isCompactSummary")), 1)
    stats.branch_length += len(kept)
    responses = {(r.get("message") or {}).get("id") or r.get("uuid") for r in kept if r.get("type") == "assistant"}
    return chain[:at] + kept + chain[at:], len(responses)


def _send_shape(messages: list[Message], stats: ImportStats, warnings: list[str]) -> list[Message]:
    """The messages as Claude Code sends them: consecutive user records are one user message
    (the API's turns alternate), and a tool result without its call is flagged, not hidden."""
    out: list[Message] = []
    calls: set[str] = set()
    for m in messages:
        calls.update(tc.id for tc in m.tool_calls)
        if m.role == "tool" and m.tool_call_id not in calls:
            stats.orphan_results += 1
        if m.role == "user" and out and out[-1].role == "user":
            prev = out[-1]
            parts = (prev.content if isinstance(prev.content, list) else [TextPart(text=prev.text())]) + \
                (m.content if isinstance(m.content, list) else [TextPart(text=m.text())])
            out[-1] = prev.model_copy(update={"content": parts, "origin": prev.origin or m.origin})
            continue
        out.append(m)
    if stats.orphan_results:
        warnings.append(f"{stats.orphan_results} tool results have no call in the rebuilt history "
                        "(a broken parent chain); the request would be refused by the API as it stands")
    if stats.image_placeholders:
        warnings.append(f"{stats.image_placeholders} images in tool results are placeholders "
                        "(\"(image omitted: …)\"); use --images keep to keep their size")
    return out


def _as_sent(session: Session, sent: claude_wire.WireLog, records: list[dict], images: str) -> None:
    """The conversation as Claude Code last sent it (its own wire records), then the reply to
    that request: send-time reminders and listings included, prompt and tools as sent."""
    msgs: list[Message] = []
    for m in sent.messages:
        role = m.get("role")
        if role == "assistant":
            a = assistant_message([{"message": m}], None)
            if a is not None:
                msgs.append(a)
        elif role == "system":
            msgs.append(Message(role="system", content=text_of(m.get("content")), origin="send-time"))
        else:
            msgs.extend(user_messages({"message": m}, None, images))
    # the reply on the same thread: the main one, or a subagent file's only (sidechain) thread
    side = not any(not r.get("isSidechain") for r in records if r.get("type") in ("user", "assistant"))
    reply = [r for r in records[sent.after + 1:] if r.get("type") == "assistant" and bool(r.get("isSidechain")) == side]
    if reply:
        ids = {(reply[0].get("message") or {}).get("id")}
        a = assistant_message([r for r in reply if (r.get("message") or {}).get("id") in ids], None)
        if a is not None:
            msgs.append(a)
    session.messages = msgs
    session.system_prompt = claude_wire.system_text(sent.system)
    session.tools = claude_wire.tools_as_functions(sent.tools) or None
    session.warnings.append(f"rebuilt from Claude Code's own record of its {sent.requests} requests "
                            "(api-request records): send-time reminders and listings included")


def _index(records: list[dict], stats: ImportStats) -> dict[str, dict]:
    """Records by ``uuid`` (the parent links' targets), counting what the stats report on the way."""
    by_uuid: dict[str, dict] = {}
    for r in records:
        t = r.get("type") or r.get("_type")
        if not is_one_of(t, KNOWN):
            stats.count_unknown(t)
        if isinstance(r.get("uuid"), str):
            by_uuid[r["uuid"]] = r
        if r.get("isSidechain"):
            stats.sidechain_records += 1
        if r.get("type") == "system" and r.get("subtype") == "compact_boundary":
            stats.compactions_total += 1
    return by_uuid


def _thread(records: list[dict], path: Path, warnings: list[str]) -> list[dict]:
    """The conversation records of the main thread, in file order; its last one is the leaf."""
    main = [r for r in records if is_one_of(r.get("type"), CONVERSATIONAL) and not r.get("isSidechain")
            and isinstance(r.get("uuid"), str)]
    if main:
        return main
    # an agent file holds only a sidechain: replay that thread
    main = [r for r in records if is_one_of(r.get("type"), CONVERSATIONAL) and isinstance(r.get("uuid"), str)]
    if not main:
        raise ImportFailed(f"{path} has no conversation records")
    warnings.append("only sidechain (subagent) records: replaying the subagent thread")
    return main


@dataclass
class _Responses:
    """Where each response's blocks and each call's results are, over the whole thread.

    Claude Code 2.x writes each content block of a response as its own record and hangs each
    tool_result off the record of its own tool_use: parallel calls and their results sit on
    sibling branches the parentUuid walk does not visit. Claude Code sends them all on resume
    (the API refuses a tool_use without its result), so the whole ``message.id`` and every
    result of its calls are gathered from the thread's records.
    """

    on_chain: set[str]
    order: dict[str, int]  # record uuid → position in the thread (file order)
    group_of: dict[str, list[dict]] = field(default_factory=dict)  # record uuid → its API response's records
    results_of: dict[str, list[dict]] = field(default_factory=dict)  # tool_use id → records holding its result


def _responses(main: list[dict], chain: list[dict]) -> _Responses:
    out = _Responses(on_chain={r["uuid"] for r in chain}, order={r["uuid"]: k for k, r in enumerate(main)})
    last_group: dict[str, list[dict]] = {}
    for r in main:
        msg = r.get("message") or {}
        if r.get("type") == "assistant" and isinstance(msg.get("id"), str):
            g = last_group.get(msg["id"])
            if g is None or _new_response(g, r):
                g = last_group[msg["id"]] = []
            g.append(r)
            out.group_of[r["uuid"]] = g
        elif r.get("type") == "user" and isinstance(msg.get("content"), list):
            for b in msg["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    lst = out.results_of.setdefault(str(b.get("tool_use_id", "")), [])
                    if not lst or lst[-1] is not r:
                        lst.append(r)
    return out


class _Transcript:
    """The thread turned into the messages Claude Code sends, with the facts met on the way
    (model, agent version, last usage). One pass: a response's blocks are merged at its first
    record, and its calls' results follow it wherever the file holds them."""

    def __init__(self, responses: _Responses, stats: ImportStats, images: str) -> None:
        self.responses, self.stats, self.images = responses, stats, images
        self.messages: list[Message] = []
        self.model: str | None = None
        self.version: str | None = None
        self.usage = Usage()
        self.done_groups: set[int] = set()
        self.consumed: set[str] = set()  # result records already placed after their calls

    def read(self, chain: list[dict]) -> _Transcript:
        i = 0
        while i < len(chain):
            r = chain[i]
            self.version = r.get("version") or self.version
            ts = iso_to_s(r.get("timestamp"))
            if r.get("type") == "assistant":
                group, i = self._response(chain, i)
                if group is not None:
                    self._assistant(r, group, ts)
                continue
            i += 1
            self._other(r, ts)
        return self

    def _response(self, chain: list[dict], i: int) -> tuple[list[dict] | None, int]:
        """The records of the response starting at ``chain[i]`` (None when already merged) and the
        index after it."""
        r = chain[i]
        i += 1
        group = self.responses.group_of.get(r["uuid"])
        if group is not None:
            if id(group) in self.done_groups:
                return None, i  # a block of a response already merged
            self.done_groups.add(id(group))
            return group, i
        # re-exports without message.id: consecutive assistant records are one turn
        group = [r]
        while i < len(chain) and chain[i].get("type") == "assistant" and not (chain[i].get("message") or {}).get("id"):
            group.append(chain[i])
            i += 1
        return group, i

    def _assistant(self, r: dict, group: list[dict], ts: float | None) -> None:
        on_chain = self.responses.on_chain
        self.stats.recovered_tool_calls += sum(1 for g in group if g["uuid"] not in on_chain
                                               for b in blocks(g) if b.get("type") == "tool_use")
        if r.get("isApiErrorMessage") or (r.get("message") or {}).get("model") == "<synthetic>":
            # an error, or Claude Code's own "No response requested.": never a model's turn, never sent
            self.stats.dropped_turns += 1
            return
        msg = assistant_message(group, ts)
        m = (r.get("message") or {}).get("model")
        if m and m != "<synthetic>":
            self.model = m
        u = (group[-1].get("message") or {}).get("usage")
        if isinstance(u, dict):
            ctx = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                     "cache_creation_input_tokens"))
            self.usage = Usage(input_tokens=u.get("input_tokens"), output_tokens=u.get("output_tokens"),
                               cache_read_tokens=u.get("cache_read_input_tokens"), context_tokens=ctx or None)
        if msg is not None:
            self.messages.append(msg)
            self._results(msg)

    def _results(self, msg: Message) -> None:
        """Every result of this turn's calls, in the order the file holds them."""
        holders: list[dict] = []
        for tc in msg.tool_calls:
            for h in self.responses.results_of.get(tc.id, []):
                if h["uuid"] not in self.consumed and all(h is not x for x in holders):
                    holders.append(h)
        holders.sort(key=lambda h: self.responses.order[h["uuid"]])
        for h in holders:
            self.consumed.add(h["uuid"])
            if h["uuid"] not in self.responses.on_chain:
                self.stats.recovered_tool_results += sum(1 for b in blocks(h) if b.get("type") == "tool_result")
            self.messages.extend(user_messages(h, iso_to_s(h.get("timestamp")), self.images, self.stats))

    def _other(self, r: dict, ts: float | None) -> None:
        """A user record not already placed after its calls, or an attachment's rendered text."""
        t = r.get("type")
        if t == "user":
            # the compaction summary is flagged visible-in-transcript-only, yet it is what the
            # next request starts with
            hidden = r.get("isVisibleInTranscriptOnly") and not r.get("isCompactSummary")
            if not (hidden or r["uuid"] in self.consumed):
                self.messages.extend(user_messages(r, ts, self.images, self.stats))
        elif t == "attachment":
            rendered = (r.get("attachment") or {}).get("rendered") or []
            text = "\n".join(x.get("content", "") for x in rendered if isinstance(x, dict) and x.get("content"))
            if text:
                self.messages.append(Message(role="user", content=text, timestamp=ts, origin="attachment"))


def _session(path: Path, records: list[dict], by_uuid: dict[str, dict], chain: list[dict],
             transcript: _Transcript, warnings: list[str]) -> Session:
    """The session's own facts (id, folder, title, time span) around its messages."""
    session_id = next((r.get("sessionId") for r in chain if r.get("sessionId")), None)
    cwd = next((r.get("cwd") for r in reversed(chain) if r.get("cwd")), None)
    title = next((r.get("summary") for r in records if r.get("type") == "summary"
                  and isinstance(r.get("leafUuid"), str) and r["leafUuid"] in by_uuid), None)
    times = [t for t in (iso_to_s(r.get("timestamp")) for r in chain) if t]
    return Session(
        format=FORMAT, agent_version=transcript.version, path=str(path), session_id=session_id, title=title,
        cwd=cwd, provider="anthropic", model=transcript.model, created=min(times) if times else None,
        updated=max(times) if times else None, messages=transcript.messages, system_prompt=None, tools=None,
        usage=transcript.usage, stats=transcript.stats, warnings=warnings,
    )


def _new_response(group: list[dict], r: dict) -> bool:
    """Whether ``r`` starts another API response than ``group`` although it carries the same
    ``message.id`` (proxies and fake providers reuse ids): another ``requestId``, or a block
    index (2.1.x ``apiBlockIndex``) the response already had."""
    req = r.get("requestId")
    if req and any(g.get("requestId") and g.get("requestId") != req for g in group):
        return True
    k = r.get("apiBlockIndex")
    return isinstance(k, int) and any(isinstance(g.get("apiBlockIndex"), int) and g["apiBlockIndex"] >= k
                                      for g in group)


def detect_head(head: Head) -> float:
    return jsonl_confidence(head, detect, 0.9)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images, thread=o.thread, once=o.once))
