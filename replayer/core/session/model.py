"""What an agent stored, reduced to the active branch: the input of every replay.

Messages are already in the shape the agent *sends* (roles system/user/assistant/tool),
because every rule that decides that shape (compaction wrappers, dropped aborted turns,
synthetic "no result" results) is format-specific and belongs to the importer. What is
kept beside the OpenAI shape — images as placeholders with their byte size, where a
message came from — serves inspection and token estimates.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from replayer.core.session import salvage

Role = Literal["system", "developer", "user", "assistant", "tool"]

#: What pi (0.80+) sends in place of an image to a model without image input; replayer uses it
#: for every format, since replays run text-only models unless images are kept.
IMAGE_OMITTED = "(image omitted: model does not support images)"


#: fields an import may leave out when their value has the wrong type (see ``salvage.validate``)
_MESSAGE_DROPPABLE = frozenset({"reasoning", "reasoning_field", "tool_call_id", "name", "timestamp", "origin"})
_USAGE_DROPPABLE = frozenset({"input_tokens", "output_tokens", "cache_read_tokens", "context_tokens"})
_SESSION_DROPPABLE = frozenset({"format_version", "agent_version", "subagent_type", "session_id", "title", "cwd",
                                "provider", "model", "thinking_level", "created", "updated", "system_prompt", "tools", "extra_body",
                                "usage"})


class TextPart(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ImagePart(BaseModel):
    """An image kept as a placeholder: the bytes never enter replayer's memory."""

    type: Literal["image"] = "image"
    mime: str = "image/png"
    byte_size: int = 0


Part = TextPart | ImagePart


def image_part(images: str, mime: str | None = None, byte_size: int = 0) -> TextPart | ImagePart:
    """An image as the request will carry it: a kept placeholder (``--images keep``) or the omitted-image text."""
    if images == "keep":
        return ImagePart(mime=mime or "image/png", byte_size=byte_size)
    return TextPart(text=IMAGE_OMITTED)


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str  # the JSON string as sent to the server


class RecordedTokens(BaseModel):
    """What the agent recorded of the request this response answered, as its server reported it
    (Cline: per API request): the prompt's tokens and how many of them the server read from its
    cache. That is the server's own reused / re-processed split, the truth a replay's prediction
    is measured against (``session_observed``)."""

    prompt: int  # the whole prompt: reused + processed
    reused: int
    output: int | None = None
    cache_written: int | None = None
    source: str = ""  # the fields it was read from, for the report's note


class Message(BaseModel):
    role: Role
    content: str | list[Part] | None = None
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    timestamp: float | None = None  # unix seconds
    origin: str | None = None  # e.g. compaction_summary, branch_summary, bash, attachment
    #: an assistant message's: the agent's own counts of the request it answered (never sent, never dumped)
    recorded: RecordedTokens | None = Field(default=None, exclude=True)

    @model_validator(mode="wrap")
    @classmethod
    def _salvage(cls, data: Any, handler: Any) -> Any:
        """During an import, a name, id, timestamp or origin of the wrong type is left out, not the message."""
        return salvage.validate(cls, data, handler, _MESSAGE_DROPPABLE)

    def text(self) -> str:
        """All text the model would read in this message (for counts and estimates)."""
        if self.content is None:
            body = ""
        elif isinstance(self.content, str):
            body = self.content
        else:
            body = "\n".join(p.text for p in self.content if isinstance(p, TextPart))
        return body

    @property
    def images(self) -> list[ImagePart]:
        if isinstance(self.content, list):
            return [p for p in self.content if isinstance(p, ImagePart)]
        return []


class ImportStats(BaseModel):
    lines: int = 0
    bad_lines: int = 0
    partial_tail: bool = False
    unknown_types: dict[str, int] = Field(default_factory=dict)
    compactions_applied: int = 0
    compactions_total: int = 0
    branch_length: int = 0  # entries on the active path
    entries_total: int = 0
    dropped_turns: int = 0  # aborted / errored assistant turns not replayed
    synthetic_results: int = 0  # tool calls that got a "no result" result
    sidechain_records: int = 0
    recovered_tool_calls: int = 0  # tool calls found off the walked chain (Claude Code 2.x parallel calls)
    recovered_tool_results: int = 0  # their results, found on sibling branches
    image_placeholders: int = 0  # images (in tool results too) replaced by the omitted-image text
    orphan_results: int = 0  # tool results whose call is not in the rebuilt history
    skipped: list[str] = Field(default_factory=list)  # records left out for a bad field, named (salvage.py)

    def count_unknown(self, kind: object) -> None:
        """One more record of a type the importer does not know (any JSON value: the file is untrusted)."""
        key = str(kind)
        self.unknown_types[key] = self.unknown_types.get(key, 0) + 1


class Usage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    context_tokens: int | None = None  # the last request's prompt size, when stored

    @model_validator(mode="wrap")
    @classmethod
    def _salvage(cls, data: Any, handler: Any) -> Any:
        """During an import, a count of the wrong type is left out (unknown), not the record."""
        return salvage.validate(cls, data, handler, _USAGE_DROPPABLE)


class Summarization(BaseModel):
    """The request an agent sent to have a compaction's summary written: the history before the
    compaction as the agent sent it (``EarlierHistory.messages[:upto]``), then its summarization
    prompt as one more user message. The prompt is the agent's code, in no file (Claude Code,
    Codex, …): ``prompt`` is None then and a capture of the agent supplies it (``agents.apply``),
    or the rebuilt request lacks it and a note says how many tokens. Its system prompt and tools
    are the conversation's, none or its own, as the agent sends them (a capture says which, else
    ``Agent.summary_sends``: Claude Code sends the conversation's both, Codex its prompt only)."""

    upto: int  # the history's messages it was sent with (Claude Code leaves out the preserved segment)
    prompt: str | None = None  # the summarization prompt, where the file stores it
    #: the history as the agent writes it into its prompt's ``<conversation>`` block instead of
    #: sending it as messages (OpenCode): the prompt is then one user message
    context: str | None = None
    reply: Message | None = None  # its response: the summary (never sent)
    timestamp: float | None = None  # when it was sent, where the file says (unix seconds)


class EarlierHistory(BaseModel):
    """The conversation as the agent last sent it before one compaction: the importer keeps it
    because the requests sent then are part of the session (a replay shows the cache lost at
    the compaction) although the agent sends none of it again. Each has its own prompt where the
    file stores one (Claude Code's billing header fingerprints the first prompt; after the
    compaction, the summary)."""

    messages: list[Message]
    system_prompt: str | None = None  # None = the session's (or, not stored, a capture's)
    tools: list[dict[str, Any]] | None = None  # None = the session's
    #: messages[:n] are what the compaction before this one left (``Session.compacted_prefix``)
    compacted_prefix: int = 0
    #: the last message ends a request that was sent (the compaction's own summarization
    #: request, rebuilt from the agent's wire records), not a response
    ends_with_request: bool = False
    #: the compaction's own summarization request, where the importer knows what it was sent with
    summarization: Summarization | None = None


class Session(BaseModel):
    format: str  # pi, claude-code, codex, opencode, openai, sharegpt, aider
    format_version: str | None = None  # "subagent": a subagent's own file (its thread of a session)
    agent_version: str | None = None
    #: the type a subagent's file says it was started as (Qwen Code's ``agentName``): its
    #: captured prompt and tools are keyed by it
    subagent_type: str | None = None
    path: str
    session_id: str | None = None
    title: str | None = None
    cwd: str | None = None
    provider: str | None = None
    model: str | None = None
    thinking_level: str | None = None
    created: float | None = None
    updated: float | None = None
    messages: list[Message]
    system_prompt: str | None = None  # None = not stored by this agent/version
    tools: list[dict[str, Any]] | None = None  # None = not stored
    system_role: str = "system"  # the role the agent sends its prompt in (pi, Codex: developer)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # stored request fields
    #: messages[:n] are what the latest compaction left (its summary and the messages it kept):
    #: a response among them answered the history before the compaction, so no request that
    #: ends there was ever sent with this one (pi)
    compacted_prefix: int = 0
    #: the history before each compaction, oldest first, where the file keeps it (pi, Claude
    #: Code, Cline, Codex, Qwen Code, OpenCode): its requests are turns too, before the ones after
    #: the compaction
    earlier: list[EarlierHistory] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stats: ImportStats = Field(default_factory=ImportStats)
    warnings: list[str] = Field(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _salvage(cls, data: Any, handler: Any) -> Any:
        """During an import, a metadata field of the wrong type (title, model, cwd, times, the
        stored prompt or tools) is left out with a note, not the session."""
        return salvage.validate(cls, data, handler, _SESSION_DROPPABLE)

    @property
    def incomplete(self) -> str | None:
        """The caveat every verdict carries when the replay is of part of what the file stored
        (lines that did not parse, a cut last line, records left out for a bad field, each
        named); None for a whole session."""
        st = self.stats
        parts = []
        if st.bad_lines or st.partial_tail:
            cut = " (the last one cut off)" if st.partial_tail else ""
            parts.append(f"{st.bad_lines} line(s) of the file did not parse{cut}")
        if st.skipped:
            named = "; ".join(st.skipped[:3]) + (f"; and {len(st.skipped) - 3} more" if len(st.skipped) > 3 else "")
            parts.append(f"{len(st.skipped)} record(s) had a field that could not be read ({named})")
        if not parts:
            return None
        return f"incomplete session: {' and '.join(parts)} and are not in the replay; the verdict is on the rest"

    @property
    def notes(self) -> list[str]:
        """What the importer noticed, for every output: its warnings, then the caveat."""
        return self.warnings + ([self.incomplete] if self.incomplete else [])

    # -- summaries ---------------------------------------------------------------------
    def role_counts(self) -> dict[str, int]:
        return dict(Counter(m.role for m in self.messages))

    @property
    def n_tool_calls(self) -> int:
        return sum(len(m.tool_calls) for m in self.messages)

    @property
    def n_tool_results(self) -> int:
        return sum(1 for m in self.messages if m.role == "tool")

    @property
    def n_chars(self) -> int:
        total = len(self.system_prompt or "")
        for m in self.messages:
            total += len(m.text()) + len(m.reasoning or "")
            total += sum(len(tc.arguments) + len(tc.name) for tc in m.tool_calls)
        return total
