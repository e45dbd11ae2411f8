"""Cline's folders made up in a temporary HOME, in the layouts its sources write (field names
from ``cline/cline``; tests/agents/test_cline_recorded_tokens.py holds the CLI's to the real
3.0.65): a CLI session with a subagent beside it, and the VS Code extensions' task folders
(Cline, Roo Code, Kilo Code), each response with the counts Cline recorded of its request."""

from __future__ import annotations

from pathlib import Path

import orjson

CLI_ID = "1796354396034_zz7ut"
SUB_FILE = "agent_1796354399002_b2muaa.messages.json"


def _text(t: str) -> list[dict]:
    return [{"type": "text", "text": t}]


def cli_session(home: Path, metrics: list[dict | None], session_id: str = CLI_ID) -> Path:
    """``~/.cline/data/sessions/<id>/<id>.messages.json``: a prompt, a tool call and its result,
    a reply, a second prompt and its reply — three requests, ``metrics[k]`` on the k-th response
    (None: none recorded) — and a subagent's file beside it."""
    d = home / ".cline" / "data" / "sessions" / session_id
    d.mkdir(parents=True)
    answers = [{"role": "assistant", "ts": 1796354398407,
                "content": [{"type": "tool_use", "id": "call_1", "name": "run_commands",
                             "input": {"commands": ["ls"]}}]},
               {"role": "assistant", "ts": 1796354398714, "content": _text("There is one file, hello.txt.")},
               {"role": "assistant", "ts": 1796354399900, "content": _text("You are welcome.")}]
    for a, m in zip(answers, metrics):
        a["modelInfo"] = {"id": "scripted", "provider": "openai-compatible"}
        if m is not None:
            a["metrics"] = m
    msgs = [{"role": "user", "ts": 1796354396820, "content": _text('<user_input mode="act">list the files</user_input>')},
            answers[0],
            {"role": "user", "ts": 1796354398491,
             "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "hello.txt\n"}]},
            answers[1],
            {"role": "user", "ts": 1796354399500, "content": _text('<user_input mode="act">thanks</user_input>')},
            answers[2]]
    doc = {"version": 1, "updated_at": "2026-12-04T03:19:59.900Z", "agent": "lead", "sessionId": session_id,
           "origin": {"source": "cli", "mode": "user", "version": "3.0.65"},
           "system_prompt": "You are Cline, a coding agent.", "messages": msgs}
    (d / f"{session_id}.messages.json").write_bytes(orjson.dumps(doc))
    sub = {"version": 1, "agent": "subagent", "sessionId": f"{session_id}__agent_1796354399002_b2muaa",
           "origin": {"source": "cli", "mode": "subagent", "parentThreadId": "someone-else", "version": "3.0.65"},
           "messages": [{"role": "user", "ts": 1796354399003, "content": _text("look around")},
                        {"role": "assistant", "ts": 1796354399010, "content": _text("done")}]}
    (d / SUB_FILE).write_bytes(orjson.dumps(sub))
    return d / f"{session_id}.messages.json"


def vscode_task(storage: Path, task_id: str, infos: list[dict], provider: str | None = None) -> Path:
    """``<globalStorage>/<extension>/tasks/<id>/``: ``api_conversation_history.json`` (a prompt,
    a tool call, its result, a reply: two requests) and ``ui_messages.json`` with one
    ``api_req_started`` per request, its ``text`` the JSON of ``infos[k]`` (``ClineApiReqInfo``);
    ``provider``: the ``task_metadata.json`` the legacy Cline extension writes."""
    d = storage / "tasks" / task_id
    d.mkdir(parents=True)
    history = [{"role": "user", "content": _text("<task>\nlist the files\n</task>")},
               {"role": "assistant", "content": [{"type": "text", "text": "Listing."},
                                                 {"type": "tool_use", "id": "toolu_1", "name": "execute_command",
                                                  "input": {"command": "ls"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello.txt"}]},
               {"role": "assistant", "content": _text("One file: hello.txt.")}]
    (d / "api_conversation_history.json").write_bytes(orjson.dumps(history))
    ui = [{"ts": 1796354396000, "type": "say", "say": "text", "text": "list the files"}]
    for k, info in enumerate(infos):
        ui.append({"ts": 1796354397000 + k, "type": "say", "say": "api_req_started", "text": orjson.dumps(info).decode()})
        ui.append({"ts": 1796354397500 + k, "type": "say", "say": "text", "text": "…"})
    (d / "ui_messages.json").write_bytes(orjson.dumps(ui))
    if provider is not None:
        meta = {"files_in_context": [], "model_usage": [{"ts": 1796354396000, "model_id": "m",
                                                        "model_provider_id": provider, "mode": "act"}]}
        (d / "task_metadata.json").write_bytes(orjson.dumps(meta))
    return d / "api_conversation_history.json"
