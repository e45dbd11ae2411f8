"""mini-swe-agent trajectories (``*.traj.json``; ``mini``'s ``last_mini_run.traj.json``).

Read from mini-swe-agent 2.4.6 (``agents/default.py``: ``serialize`` writes ``info``,
``messages`` and ``trajectory_format: "mini-swe-agent-1.1"``; ``models/litellm_model.py``): the
messages are the agent's own list, and each request sends that list as it stood, every message
less its ``extra`` key (``_prepare_messages_for_api``) — so the file is the last request's
messages, read by the OpenAI-body importer, and every earlier request a prefix of it. The
``exit`` message that ends a run is never sent. The system prompt is the first message. The
tools are not stored: ``LitellmModel`` sends its one ``bash`` tool (``BASH_TOOL`` of
``models/utils/actions_toolcall.py``, put here from that source), the text-based models none;
another model class's tools are not known (a note says so). A request answered by a reply it
could not parse (``FormatError``) adds only the error message to the history (the reply in its
``extra.response``): that request is no turn, and a note counts them. A trajectory of the
Responses API models (items with ``object: "response"``) is not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.formats import openai_body
from replayer.core.session.model import Session
from replayer.core.session.registry import Head, Importer, doc_confidence, read_doc

FORMAT = "mini-swe-agent"
#: the one tool ``LitellmModel._query`` sends (mini-swe-agent 2.4.6 ``actions_toolcall.BASH_TOOL``)
BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Execute a bash command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string",
                                                                 "description": "The bash command to execute"}},
                   "required": ["command"]}}}


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("trajectory_format", "")).startswith("mini-swe-agent") \
        and isinstance(doc.get("messages"), list)


def _config(doc: dict) -> dict:
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
    return cfg


def load(path: Path, doc: dict, images: str = "omit") -> Session:
    msgs = doc["messages"]
    if any(isinstance(m, dict) and m.get("object") == "response" for m in msgs):
        raise ImportFailed(f"{path}: a mini-swe-agent trajectory of a Responses API model, not read")
    sent = [m for m in msgs if not (isinstance(m, dict) and m.get("role") == "exit")]
    cfg = _config(doc)
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    kind = str(cfg.get("model_type", ""))
    tools = [BASH_TOOL] if kind.endswith(".LitellmModel") else None
    s = openai_body.load(path, {"messages": sent, "model": model.get("model_name"), "tools": tools}, images=images)
    warnings = list(s.warnings)
    if len(sent) < len(msgs):
        warnings.append(f"{len(msgs) - len(sent)} 'exit' message(s) left out: mini-swe-agent never sends them")
    # a reply it could not parse (no or a bad tool call) is never put in the history: the error
    # message that follows keeps it in its ``extra.response``, and the request it answered is no turn
    unparsed = sum(1 for m in sent if isinstance(m, dict) and m.get("role") == "user"
                   and isinstance(m.get("extra"), dict) and "response" in m["extra"])
    if unparsed:
        warnings.append(f"{unparsed} request(s) were answered by a reply mini-swe-agent could not parse; the reply "
                        "is kept only beside its error message, not in the history, so those requests are no turns")
    if tools is None and not kind.endswith("TextbasedModel"):
        warnings.append(f"the tools of model class {kind or '(not recorded)'} are not known: the rebuild sends none")
    info = doc.get("info") if isinstance(doc.get("info"), dict) else {}
    return s.model_copy(update={"format": FORMAT, "warnings": warnings,
                                "agent_version": info.get("mini_version") if isinstance(info.get("mini_version"), str)
                                else None})


def detect_head(head: Head) -> float:
    return doc_confidence(head, detect, 0.9)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, read_doc(path, detect, "a mini-swe-agent trajectory"),
                                                             o.images))
