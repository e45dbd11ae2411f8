"""The requests an agent sent during a session, in order: the input of a session replay.

From an imported session, request *k* holds every message before the *k*-th assistant
response (system prompt and tools as for the resume request), and a last request holds the
whole conversation (the resume). A run of consecutive assistant messages is one response:
the agent sent one request before it, not one per message.

What the importers keep decides what can be rebuilt. They reduce a session to its active
branch after the *latest* compaction (pi, Claude Code, Codex, OpenCode, Cline); the first turn
after it starts with the compaction summary, as the agent's next request really did. Where the
file keeps the history before a compaction (pi, Claude Code, Cline, Codex, Qwen Code, OpenCode:
``Session.earlier``), its requests are turns too, before those (``earlier_turns``); turns on
abandoned branches are not rebuilt, nor the summarization requests. A stored system prompt is one text for the whole session, so turns
rebuilt from a session never change it. A JSONL log of request bodies
(``request_log``) has none of these limits: its lines are the turns exactly as sent.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replayer.core.errors import ReplayerError
from replayer.core.session import Session, load_session
from replayer.core.session.request import ChatRequest, request_from_files


#: the thread of a request that names none: the main conversation
MAIN = "main"
#: the thread of each compaction's summarization request (``summarize.THREAD``)
SUMMARY_THREAD = "compaction"


def thread_of(turn) -> str:
    """The thread a turn belongs to: its ``thread`` attribute (importers), its body's field, else main."""
    t = getattr(turn, "thread", None)
    if not t:
        body = getattr(turn, "_body", None) or {}
        t = body.get("thread") if isinstance(body, dict) else None
    return str(t) if t else MAIN


class Turn:
    """One request of the session: its body (messages, tools and any stored request fields).

    A turn rebuilt from a session is the first ``n_messages`` of the whole conversation: it
    keeps the conversation's body and that count, not a copy of its prefix (a thousand turns
    each holding their own list would make a long session quadratic in memory).
    ``messages`` and ``body`` build the turn's own when asked."""

    __slots__ = ("index", "notes", "prefix_of", "n_messages", "_body", "wire", "thread", "prompt", "times",
                 "recorded")

    def __init__(self, index: int, body: dict[str, Any], notes: list[str] | None = None,
                 prefix_of: int | None = None, *, n_messages: int | None = None,
                 wire: tuple[str, dict[str, Any]] | None = None, thread: str | None = None,
                 prompt: str | None = None) -> None:
        self.index = index
        # the prompt text itself, when the server logged it (a --log-prompts-dir folder): laid out
        # as it is, with no template and no messages, and sent live to /completion
        self.prompt = prompt
        self.wire = wire  # (endpoint, body) as recorded, when not the chat body itself (a traffic log)
        self.thread = thread  # the thread an importer put it on (None: its body's field, else main)
        self.notes = notes if notes is not None else []
        self.prefix_of = prefix_of  # a turn whose messages begin with these, by construction
        self._body = body
        self.n_messages = len(body["messages"]) if n_messages is None else n_messages
        # (sent, answered) in unix seconds where the file records them (None each where not): what
        # the server's idle time between requests is read from (``server.lifecycle``)
        self.times: tuple[float | None, float | None] | None = None
        # what the agent recorded of this request's tokens, as its server reported them (Cline's
        # per-request counts, ``RecordedTokens``): the report sets the prediction beside it
        self.recorded: Any = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        m = self._body["messages"]
        return m if self.n_messages == len(m) else m[:self.n_messages]

    @property
    def body(self) -> dict[str, Any]:
        """The request as sent."""
        b = self._body
        return b if self.n_messages == len(b["messages"]) else {**b, "messages": self.messages}

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self._body.get("tools")

    def message(self, i: int) -> dict[str, Any]:
        """Message ``i`` (from 0), read in place: no copy of the prefix as ``messages`` makes."""
        if not 0 <= i < self.n_messages:
            raise IndexError(f"message {i} of a turn of {self.n_messages}")
        return self._body["messages"][i]

    def starts_with(self, other: "Turn") -> bool:
        """``other``'s messages begin this turn's. Free for two turns of one conversation (they
        share its list); other turns are compared message by message, neither list copied."""
        n = other.n_messages
        mine, theirs = self._body["messages"], other._body["messages"]
        if n > self.n_messages:
            return False
        return mine is theirs or all(map(operator.eq, itertools.islice(mine, n), itertools.islice(theirs, n)))

    def same_fields(self, other: "Turn") -> bool:
        """Everything but the messages that a render depends on is the same."""
        a, b = self._body, other._body
        return a is b or (a.get("tools") == b.get("tools")
                          and a.get("chat_template_kwargs") == b.get("chat_template_kwargs"))

    def __repr__(self) -> str:
        return f"Turn({self.index}, {self.n_messages} messages)"


@dataclass
class SessionTurns:
    session: Session
    request: ChatRequest  # the resume request (= the last turn's body)
    turns: list[Turn]
    exact: bool  # True for a request log: the turns are what was sent, not a reconstruction
    notes: list[str] = field(default_factory=list)


def response_starts(messages: list[dict[str, Any]]) -> list[int]:
    """Indices of the assistant messages that begin a response (one request was sent before each)."""
    return [i for i, m in enumerate(messages)
            if m.get("role") == "assistant" and (i == 0 or messages[i - 1].get("role") != "assistant")]


def request_starts(request: ChatRequest) -> list[int]:
    """The response starts whose request was sent with this history: not the first message,
    and not among what a compaction kept from before it (those answered the longer history)."""
    return [i for i in response_starts(request.messages) if i > 0 and i >= request.compacted_prefix]


def count_turns(request: ChatRequest) -> int:
    """``len(turns_of_request(request))`` without building the turns."""
    return len(request_starts(request)) + 1


def turns_of_request(request: ChatRequest) -> list[Turn]:
    body = request.body
    starts = request_starts(request)
    if request.run_parts is not None and request.plain_messages is not None:
        out = _turns_with_run_parts(request, starts)
    else:
        out = [Turn(k, body, prefix_of=len(starts), n_messages=i) for k, i in enumerate(starts)]
    for t in out:  # each turn's response answered its request: the counts the agent kept of it
        t.recorded = request.recorded.get(t.n_messages)
    out.append(Turn(len(out), body, notes=["the resume request (whole conversation)"]))
    return out


def _turns_with_run_parts(request: ChatRequest, starts: list[int]) -> list[Turn]:
    """Turns whose latest prompt is not the conversation's last: each carries the run's parts
    before its own latest prompt (one body per prompt, the message dicts shared), not the last's."""
    plain = request.plain_messages or []
    users = [i for i, m in enumerate(plain) if m.get("role") == "user"]
    latest = [max((u for u in users if u < i), default=None) for i in starts]
    last_of_run = {u: k for k, u in enumerate(latest)}
    bodies: dict[int, dict[str, Any]] = {}
    out = []
    for k, (i, u) in enumerate(zip(starts, latest)):
        if u is None or u == users[-1]:
            out.append(Turn(k, request.body, prefix_of=len(starts), n_messages=i))
            continue
        if u not in bodies:
            bodies[u] = {**request.body, "messages": request.run_parts.place(plain, u)}
        out.append(Turn(k, bodies[u], prefix_of=last_of_run[u], n_messages=i))
    return out


def turns_of_bodies(bodies: list[dict[str, Any]], wires: list | None = None) -> list[Turn]:
    """One turn a logged request; ``wires``: each one's (endpoint, body) as recorded."""
    out = []
    last: dict[str, int] = {}  # thread → messages in its previous request
    for k, b in enumerate(bodies):
        t = Turn(k, dict(b), wire=wires[k] if wires else None)
        th = thread_of(t)
        if th in last and len(b["messages"]) < last[th]:
            t.notes.append("fewer messages than the previous request: history replaced (compaction or rewind)")
        last[th] = len(b["messages"])
        out.append(t)
    return out


def load_turns(path: str | Path, format: str | None = None, *, system_prompt: str | None = None,
               tools: str | None = None, images: str = "omit") -> SessionTurns:
    s = load_session(path, format, images=images)
    notes: list[str] = []
    if s.format == "prompt-log":  # the server's own prompts: each one a turn, as it processed it
        from replayer.core.session.formats.prompt_log import read_prompt_log

        turns = [Turn(k, {"messages": []}, wire=("/completion", {"prompt": text}), prompt=text)
                 for k, text in enumerate(read_prompt_log(Path(path).expanduser()).prompts)]
        # no system prompt or tools to supply: the prompts hold them, rendered by the server
        return SessionTurns(s, ChatRequest(body={"messages": [m.model_dump() for m in s.messages]}), turns, True)
    req = request_from_files(s, system_prompt, tools)
    if s.format in ("chat-requests", "traffic-log"):  # logs of the requests as sent: the turns are the lines
        from replayer.core.session.formats import recorded_traffic, request_log

        if s.format == "traffic-log":  # each request also as sent, to its own endpoint (a live replay)
            t = recorded_traffic.read_traffic(Path(path).expanduser())
            turns = turns_of_bodies(t.bodies, t.wire)
            for turn, o in zip(turns, t.observed):
                turn.times = (o.sent, o.done)
        else:
            turns = turns_of_bodies(request_log.read_bodies(Path(path).expanduser())[0])
        exact = True
    else:
        earlier = earlier_turns(s, system_prompt, tools)
        turns, exact = chain_turns([*earlier, turns_of_request(req)]), False
        turns = _with_subagents(turns, s, Path(path).expanduser(), images, notes)
        # one thread: each request dated by its response's own time (``threads.message_times``)
        if not earlier and not req.compacted_prefix and all(t.times is None for t in turns):
            from replayer.core.session.threads import message_times

            for t, when in zip(turns[:-1], message_times(s)):
                t.times = (when, None)
        if s.stats.compactions_applied:
            notes.append(_compaction_note(s, sum(map(len, earlier)),
                                          sum(1 for g in earlier for t in g if t.thread == SUMMARY_THREAD)))
        if s.stats.compactions_applied and (
                kept := sum(1 for i in response_starts(req.messages) if 0 < i < req.compacted_prefix)):
            notes.append(f"{kept} response(s) the compaction kept answered the history before it: "
                         "no turn of them (they were not sent with the summary)")
    if not turns:
        raise ReplayerError(f"{s.path}: no turns to replay")
    return SessionTurns(s, req, turns, exact, notes)


def earlier_turns(s: Session, system_prompt: str | None = None, tools: str | None = None) -> list[list[Turn]]:
    """The requests sent before each compaction, one list a compaction, oldest first: each
    history the importer kept (``Session.earlier``) made into turns as the session's own are —
    its prompt and tools, or the ones supplied or captured — without a resume request, unless
    the history ends with a request that was sent (the summarization request)."""
    from replayer.core.session.summarize import THREAD, summarization_body

    out = []
    for h in s.earlier:
        sub = s.model_copy(update={"messages": h.messages, "system_prompt": h.system_prompt or s.system_prompt,
                                   "tools": h.tools if h.tools is not None else s.tools,
                                   "compacted_prefix": h.compacted_prefix, "earlier": []})
        req = request_from_files(sub, system_prompt, tools)
        ts = turns_of_request(req)
        ts = ts if h.ends_with_request else ts[:-1]
        made = summarization_body(s, h, req)
        if made is not None:  # the compaction's own request, on its thread, after the history's
            body, n, notes = made
            ts.append(Turn(len(ts), body, ["the compaction's summarization request", *notes], n_messages=n,
                           thread=THREAD))
        out.append(ts)
    return out


def chain_turns(groups: list[list[Turn]]) -> list[Turn]:
    """Lists of turns one after the other, numbered on; each keeps its own prefix links."""
    if len(groups) == 1:
        return groups[0]
    out: list[Turn] = []
    for g in groups:
        off = len(out)
        out += [_carried(Turn(off + t.index, t._body, t.notes, None if t.prefix_of is None else off + t.prefix_of,
                              n_messages=t.n_messages, wire=t.wire, thread=t.thread), t, times=False) for t in g]
    return out


def _carried(new: Turn, old: Turn, times: bool = True) -> Turn:
    """``new``, a renumbered copy of ``old``, with what was learnt of ``old`` after it was made."""
    new.recorded = old.recorded
    if times:
        new.times = old.times
    return new


def _compaction_note(s: Session, n_earlier: int, n_summaries: int) -> str:
    """What the turns hold of a compacted session: the requests before the compactions too, where
    the importer kept that history, else only those after the latest one."""
    n = s.stats.compactions_total
    if not s.earlier:
        return (f"{n} compaction(s) in the file: turns start after the latest one (the importer keeps only "
                "the history the agent sent from then on)")
    sent = sum(1 for h in s.earlier if h.ends_with_request) + n_summaries
    summ = (f", {sent} of them the summarization request (thread {SUMMARY_THREAD!r})" if sent else
            "; the summarization request(s) are not rebuilt (the agent's own prompt, not in the file)")
    return (f"{n} compaction(s) in the file: {n_earlier} turn(s) are the requests sent before "
            f"{'them' if len(s.earlier) > 1 else 'it'}, rebuilt from the history the file keeps{summ}; "
            "the next turn starts from the summary (the cache is lost there)")


def _with_subagents(turns: list[Turn], s: Session, path: Path, images: str, notes: list[str]) -> list[Turn]:
    """The main thread's turns with each subagent's requests (``threads.sub_threads``: Claude
    Code's per-agent files and sidechains, OpenCode's child sessions) put between them by the
    time each was sent, each on its own thread. A subagent's last turn (its whole conversation,
    ending with its answer) was never sent: it is left out."""
    from replayer.core.session import threads
    from replayer.core.session.reader import JsonlFile

    once = JsonlFile(path)  # the main file, parsed (if at all) once for its times and sidechains
    subs = threads.sub_threads(s, path, images, once)
    if not subs:
        return turns
    keyed: list[tuple[float, int, Turn]] = []
    last = float("-inf")
    own = [t for t in turns[:-1] if not t.thread]  # a compaction's summarization turn is no request of these times
    times = iter(threads.main_times(s, path, once)[:len(own)])
    for t in turns[:-1]:
        when = None if t.thread else next(times, None)
        last = when if when is not None else last
        t.times = (when, None)
        keyed.append((last, 0, t))  # a summarization turn stays after the main turn before it
    untimed = 0
    sources: list[str] = []
    for sub, sess in threads.loaded(subs, notes):
        sub_turns = turns_of_request(request_from_files(sess))[:-1]
        for t, when in itertools.zip_longest(sub_turns, sub.times(sess)[:len(sub_turns)]):
            t.thread = sub.name
            t.times = (when, None)
            if when is None:
                untimed += 1
            keyed.append((when if when is not None else float("inf"), 1, t))
        if sub_turns and threads.SOURCE[sub.source] not in sources:
            sources.append(threads.SOURCE[sub.source])
    if len(keyed) == len(turns) - 1:
        return turns
    keyed.sort(key=operator.itemgetter(0, 1))  # stable: each thread keeps its own order
    merged = [k[2] for k in keyed] + [turns[-1]]
    out = [_carried(Turn(k, t._body, t.notes, None if t.thread else len(merged) - 1, n_messages=t.n_messages,
                         thread=t.thread), t) for k, t in enumerate(merged)]
    n_threads = len({t.thread for t in merged if t.thread and t.thread != SUMMARY_THREAD})
    notes.append(f"{len(out) - len(turns)} subagent request(s) on {n_threads} thread(s) from "
                 f"{' and '.join(sources)}, placed between the main turns by their times")
    if untimed:
        notes.append(f"{untimed} subagent request(s) carry no time: placed before the resume request")
    return out


def session_threads(s: Session, request: ChatRequest, path: str | Path, images: str = "omit") -> dict[str, int]:
    """Requests per thread, as ``load_turns`` would order them, without laying out the turns
    (what ``inspect`` shows): a request log's ``thread`` fields, else the main thread's turns
    and each subagent thread's sent requests (``threads.sub_threads``)."""
    if s.format == "prompt-log":  # the server's prompts carry no thread: one a request, in order
        return {MAIN: s.stats.entries_total}
    if s.format in ("chat-requests", "traffic-log"):
        from replayer.core.session.formats import recorded_traffic, request_log

        reader = request_log if s.format == "chat-requests" else recorded_traffic
        bodies, _ = reader.read_bodies(Path(path).expanduser())
        out: dict[str, int] = {}
        for b in bodies:
            th = thread_of(Turn(0, b))
            out[th] = out.get(th, 0) + 1
        return out
    from replayer.core.session import threads

    out = {MAIN: count_turns(request)}
    for t in itertools.chain.from_iterable(earlier_turns(s)):
        out[t.thread or MAIN] = out.get(t.thread or MAIN, 0) + 1
    for sub, sess in threads.loaded(threads.sub_threads(s, Path(path).expanduser(), images), s.warnings):
        n = count_turns(request_from_files(sess)) - 1
        if n > 0:
            out[sub.name] = n
    return out


def freeze_system_prompt(turns: list[Turn]) -> list[Turn]:
    """What-if: every turn carries the first turn's system prompt (a client that never changed it)."""
    first = next((t.messages[0] for t in turns if t.messages and t.messages[0].get("role") in ("system", "developer")),
                 None)
    if first is None:
        return turns
    out = []
    for t in turns:
        msgs = t.messages
        if msgs and msgs[0].get("role") in ("system", "developer") and msgs[0] != first:
            t = _carried(Turn(t.index, {**t.body, "messages": [first, *msgs[1:]]}, t.notes + ["system prompt frozen"],
                              t.prefix_of), t, times=False)
        out.append(t)
    return out
