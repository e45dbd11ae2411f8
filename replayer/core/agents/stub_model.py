"""A scripted model on 127.0.0.1 for the real agent CLIs, logging every request they send.

``replayer agents capture`` points the user's own agent at it to learn the system prompt and
tools that agent sends; the conformance suite (tests/agents) drives each agent through tool
rounds with it. The agents are the thing observed, so the model only has to be predictable: a user prompt
holding ``TOOL`` is answered with one call of the agent's own shell (or, failing that, file)
tool, found in the tools the request carries and filled from that tool's JSON schema; every
other request is answered with a short text (and a short reasoning where the API has one).
It speaks the wire formats the agents use — chat completions, Responses, Anthropic Messages
and Gemini's generateContent — streamed or not — and only on 127.0.0.1. What it logs is the agents' own prompts:
they stay in memory or the user's cache, never in the repository.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

#: the agents' shell tools, best first; a file-reading tool is the fallback
SHELL_TOOLS = ("bash", "Bash", "shell", "shell_command", "exec_command", "run_shell_command",
               "execute_command", "run_terminal_cmd", "run_commands")
READ_TOOLS = ("read", "Read", "read_file", "view")
#: the agents' subagent tools, for a prompt holding ``SUBAGENT``
AGENT_TOOLS = ("Agent", "Task", "task", "spawn_agent", "agent", "invoke_agent")
#: the tool a Gemini CLI subagent must end with (its answer), called on its first plain prompt
FINISH_TOOL = "complete_task"
SHELL_COMMAND = "ls"
#: the system prompt a subagent tool that asks for one is given (Cline's ``spawn_agent``)
SUBAGENT_SYSTEM_PROMPT = "You are a helper subagent. Answer in one line."
#: the summary for a compaction prompt that asks for a ``<state_snapshot>`` (Qwen Code's)
STATE_SNAPSHOT = ("<analysis>The user asked for the files.</analysis>\n<state_snapshot>\nSummary: the user "
                  "asked for files to be listed; they were.\n</state_snapshot>")
#: the reply to a prompt asking for ``<summary>`` blocks (Claude Code's: without one it asks again)
SUMMARY_BLOCKS = "<analysis>The user asked.</analysis>\n\n<summary>\nSummary: the files were listed.\n</summary>"


@dataclass
class Logged:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Reply:
    text: str = ""
    reasoning: str = ""
    call: tuple[str, str] | None = None  # (tool name, JSON arguments)
    namespace: str | None = None  # the Responses namespace tool the call's tool is in (Codex's multi_agent_v1)


def _tools(api: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool name → JSON schema of its parameters, from the request's own tool list."""
    out: dict[str, dict[str, Any]] = {}
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if api == "chat" and isinstance(t.get("function"), dict):
            out[t["function"].get("name", "")] = t["function"].get("parameters") or {}
        elif api == "responses" and t.get("type") == "function":
            out[t.get("name", "")] = t.get("parameters") or {}
        elif api == "anthropic" and "name" in t:
            out[t["name"]] = t.get("input_schema") or {}
        elif api == "gemini":
            for f in t.get("functionDeclarations") or []:
                if isinstance(f, dict):
                    out[f.get("name", "")] = f.get("parametersJsonSchema") or f.get("parameters") or {}
    return out


def _value(key: str, schema: dict[str, Any], file_path: str) -> Any:
    """A plausible value for one required parameter (a command, a path, a description)."""
    kind = schema.get("type")
    k = key.lower()
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if k in ("subagent_type", "agent_type"):
        return "general-purpose"
    if k == "agent_name":  # Gemini CLI's invoke_agent: its general-purpose subagent
        return "generalist"
    if k in ("systemprompt", "system_prompt"):  # Cline's spawn_agent: the subagent's whole prompt
        return SUBAGENT_SYSTEM_PROMPT
    if kind == "array":
        return [SHELL_COMMAND] if "command" in k or "cmd" in k else []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    if kind == "object":  # its required fields filled too (Gemini CLI's complete_task: result.response)
        props = schema.get("properties") or {}
        return {k: _value(k, props.get(k) or {}, file_path) for k in schema.get("required") or []}
    if "command" in k or k == "cmd":
        return SHELL_COMMAND
    if "path" in k or "file" in k:
        return file_path
    return "list the files"


def tool_call(api: str, body: dict[str, Any], file_path: str, subagent: bool = False) -> tuple[str, str] | None:
    """One call of the agent's shell (else read) tool, or its subagent tool, with arguments its
    schema requires."""
    tools = _tools(api, body)
    if subagent:
        name = next((n for n in AGENT_TOOLS if n in tools), None)
    else:
        name = next((n for n in SHELL_TOOLS if n in tools), None) or next((n for n in READ_TOOLS if n in tools), None)
    if name is None:
        return None
    schema = tools[name]
    props = schema.get("properties") or {}
    args = {k: _value(k, props.get(k) or {}, file_path) for k in schema.get("required") or list(props)[:1]}
    for k in ("subagent_type", "agent_type"):
        if k in args:
            args[k] = _general_agent(_description(api, body, name))
    if subagent and name == "agent" and isinstance(props.get("run_in_background"), dict):
        args["run_in_background"] = False  # Qwen Code: the result inline, so the parent waits for it
    return name, json.dumps(args)


def namespace_call(api: str, body: dict[str, Any]) -> tuple[str, tuple[str, str]] | None:
    """(namespace, call) of a subagent tool inside a Responses ``namespace`` tool: Codex 0.171
    offers ``spawn_agent`` only as ``multi_agent_v1.spawn_agent``, which ``_tools`` (function tools
    only) does not see. The task goes in ``message`` (its schema requires nothing)."""
    if api != "responses":
        return None
    for t in body.get("tools") or []:
        if not (isinstance(t, dict) and t.get("type") == "namespace" and isinstance(t.get("tools"), list)):
            continue
        for inner in t["tools"]:
            if isinstance(inner, dict) and inner.get("name") in AGENT_TOOLS:
                props = (inner.get("parameters") or {}).get("properties") or {}
                key = "message" if "message" in props else next(iter(props), "message")
                return str(t.get("name", "")), (inner["name"], json.dumps({key: "list the files"}))
    return None


def wait_call(api: str, body: dict[str, Any]) -> tuple[str, tuple[str, str]] | None:
    """(namespace, call) of Codex's ``wait_agent`` on the agent that the request's last item, a
    ``spawn_agent`` result (``{"agent_id": …}``), started: waiting keeps ``codex exec`` from ending
    its turn, and shutting the subagent down, before the subagent has answered."""
    items = body.get("input") if api == "responses" and isinstance(body.get("input"), list) else []
    last = items[-1] if items and isinstance(items[-1], dict) else {}
    if last.get("type") != "function_call_output" or not isinstance(last.get("output"), str):
        return None
    try:
        agent_id = json.loads(last["output"]).get("agent_id")
    except (ValueError, AttributeError):
        return None
    for t in body.get("tools") or []:
        if isinstance(t, dict) and t.get("type") == "namespace" and any(
                isinstance(x, dict) and x.get("name") == "wait_agent" for x in t.get("tools") or []):
            return str(t.get("name", "")), ("wait_agent", json.dumps({"targets": [agent_id]}))
    return None


def agent_id_waited(api: str, body: dict[str, Any]) -> str | None:
    """The agent a ``wait_agent`` call of the request already waited on (one wait per subagent)."""
    for it in body.get("input") or [] if api == "responses" and isinstance(body.get("input"), list) else []:
        if isinstance(it, dict) and it.get("type") == "function_call" and it.get("name") == "wait_agent":
            return str(it.get("arguments"))
    return None


def _description(api: str, body: dict[str, Any], name: str) -> str:
    """The description of the request's tool ``name``."""
    for t in body.get("tools") or []:
        f = t.get("function") if isinstance(t, dict) and api == "chat" else t
        if isinstance(f, dict) and f.get("name") == name:
            return str(f.get("description") or "")
    return ""


def _general_agent(description: str) -> str:
    """The general-purpose agent type the subagent tool's description lists (``- general:
    General-purpose agent …`` in OpenCode, ``- general-purpose: …`` in Claude Code)."""
    m = re.search(r"^- ([\w-]+): general-purpose", description, re.IGNORECASE | re.MULTILINE)
    return m.group(1) if m else "general-purpose"


def _last_input(api: str, body: dict[str, Any]) -> tuple[str, str]:
    """(kind, text) of what the request ends with: ``tool`` for a tool result, else ``user``."""
    if api == "chat":
        msgs = body.get("messages") or [{}]
        last = msgs[-1]
        if last.get("role") == "tool":
            return "tool", ""
        return "user", json.dumps(last.get("content"))
    if api == "responses":
        items = body.get("input") or [{}]
        items = items if isinstance(items, list) else [{"content": items}]
        last = items[-1]
        if str(last.get("type", "")).endswith("_output"):
            return "tool", ""
        return "user", json.dumps(last.get("content"))
    if api == "gemini":
        contents = body.get("contents") or [{}]
        parts = [p for p in (contents[-1].get("parts") or []) if isinstance(p, dict)]
        if any("functionResponse" in p for p in parts):
            return "tool", ""
        return "user", json.dumps(parts)
    msgs = [m for m in body.get("messages") or [] if m.get("role") != "system"] or [{}]  # Claude Code's mid-
    content = msgs[-1].get("content")  # conversation system message (listings) is not the user's turn
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return "tool", ""
    return "user", json.dumps(content)


def script(api: str, body: dict[str, Any], file_path: str) -> Reply:
    kind, text = _last_input(api, body)
    if api == "anthropic" and "<summary>" in (t := json.dumps((body.get("messages") or [{}])[-1])) and "TOOL" not in t:
        return Reply(text=SUMMARY_BLOCKS)  # Claude Code adds its summarization prompt after the tool results
    if kind == "user" and ("TOOL" in text or "SUBAGENT" in text):
        call = tool_call(api, body, file_path, subagent="SUBAGENT" in text)
        if call is not None:
            return Reply(reasoning="The user wants a tool run.", call=call)
        if "SUBAGENT" in text and (nc := namespace_call(api, body)) is not None:
            return Reply(reasoning="The user wants a tool run.", call=nc[1], namespace=nc[0])
    if api == "gemini" and kind == "user" and FINISH_TOOL in (tools := _tools(api, body)):
        schema = tools[FINISH_TOOL]
        props = schema.get("properties") or {}
        args = {k: _value(k, props.get(k) or {}, file_path) for k in schema.get("required") or list(props)[:1]}
        return Reply(reasoning="Report back.", call=(FINISH_TOOL, json.dumps(args)))
    if kind == "tool" and agent_id_waited(api, body) is None and (wc := wait_call(api, body)) is not None:
        return Reply(reasoning="Wait for the helper.", call=wc[1], namespace=wc[0])
    if kind == "user" and "<state_snapshot>" in text and "TOOL" not in text:
        return Reply(text=STATE_SNAPSHOT)  # Qwen Code keeps a summary only when it holds a state snapshot
    if kind == "user" and "summar" in text.lower() and "TOOL" not in text:
        return Reply(text="Summary: the user asked for files to be listed; they were.")
    return Reply(text="Done." if kind == "tool" else "Hello from the scripted model.", reasoning="Short answer.")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})
        else:
            self._json({"status": "ok"})

    def do_HEAD(self) -> None:
        self._json({})

    def do_POST(self) -> None:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        path = self.path.split("?")[0]
        with self.server.lock:
            self.server.log.append(Logged(path, body, {k.lower(): v for k, v in self.headers.items()}))
        if path.endswith("/count_tokens"):
            return self._json({"input_tokens": len(raw) // 4})
        if path.endswith(":countTokens"):
            return self._json({"totalTokens": len(raw) // 4})
        if path.endswith(":streamGenerateContent") or path.endswith(":generateContent"):
            return self._gemini(script("gemini", body, self.server.file_path), path.endswith(":streamGenerateContent"),
                                body)
        if path.endswith("/chat/completions"):
            api = "chat"
        elif path.endswith("/responses"):
            api = "responses"
        elif path.endswith("/messages"):
            api = "anthropic"
        else:
            return self._json({"error": {"message": f"no route {path}"}}, 404)
        reply = script(api, body, self.server.file_path)
        stream = bool(body.get("stream"))
        getattr(self, f"_{api}")(reply, stream, body)

    # -- transport ---------------------------------------------------------------------
    def _json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, Any]]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for name, data in events:
            chunk = (f"event: {name}\n" if name else "") + "data: " + (
                data if isinstance(data, str) else json.dumps(data)) + "\n\n"
            self.wfile.write(chunk.encode())
        self.wfile.flush()
        self.close_connection = True

    # -- chat completions --------------------------------------------------------------
    def _chat(self, r: Reply, stream: bool, body: dict) -> None:
        cid, created = f"chatcmpl-{self.server.next_id()}", int(time.time())
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if self.server.usage_by_size or self.server.prompt_tokens:
            n = self.server.prompt_tokens(body) if self.server.prompt_tokens else len(json.dumps(body)) // 4
            usage = {"prompt_tokens": n, "completion_tokens": 10, "total_tokens": n + 10}
        if self.server.cached_tokens:  # as llama-server reports its cache_n (``timings`` aside)
            usage["prompt_tokens_details"] = {"cached_tokens": self.server.cached_tokens(body)}
        calls = [{"index": 0, "id": f"call_{self.server.next_id()}", "type": "function",
                  "function": {"name": r.call[0], "arguments": r.call[1]}}] if r.call else []
        finish = "tool_calls" if calls else "stop"
        if not stream:
            msg: dict[str, Any] = {"role": "assistant", "content": r.text or None}
            if r.reasoning:
                msg["reasoning_content"] = r.reasoning
            if calls:
                msg["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
            return self._json({"id": cid, "object": "chat.completion", "created": created, "model": "scripted",
                               "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage})

        def chunk(delta: dict, fin: str | None = None, **extra) -> tuple[None, dict]:
            return None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": "scripted",
                          "choices": [{"index": 0, "delta": delta, "finish_reason": fin}], **extra}

        ev = [chunk({"role": "assistant", "content": ""})]
        if r.reasoning:
            ev.append(chunk({"reasoning_content": r.reasoning}))
        if r.text:
            ev.append(chunk({"content": r.text}))
        if calls:
            ev.append(chunk({"tool_calls": calls}))
        ev.append(chunk({}, finish))
        ev.append((None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": "scripted",
                          "choices": [], "usage": usage}))
        ev.append((None, "[DONE]"))
        self._sse(ev)

    # -- Responses ---------------------------------------------------------------------
    def _responses(self, r: Reply, stream: bool, body: dict) -> None:
        rid = f"resp_{self.server.next_id()}"
        items: list[dict[str, Any]] = []
        if r.reasoning:
            items.append({"type": "reasoning", "id": f"rs_{self.server.next_id()}",
                          "summary": [{"type": "summary_text", "text": r.reasoning}]})
        if r.text:
            items.append({"type": "message", "id": f"msg_{self.server.next_id()}", "role": "assistant",
                          "status": "completed", "content": [{"type": "output_text", "text": r.text,
                                                               "annotations": []}]})
        if r.call:
            items.append({"type": "function_call", "id": f"fc_{self.server.next_id()}", "status": "completed",
                          "call_id": f"call_{self.server.next_id()}", "name": r.call[0], "arguments": r.call[1]})
            if r.namespace:
                items[-1]["namespace"] = r.namespace
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
        resp = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed",
                "model": "scripted", "output": items, "usage": usage}
        if not stream:
            return self._json(resp)
        ev: list[tuple[str | None, Any]] = [
            ("response.created", {"type": "response.created", "response": {**resp, "status": "in_progress",
                                                                             "output": []}})]
        for k, it in enumerate(items):
            ev.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": k,
                                                      "item": it}))
            if it["type"] == "message":
                ev.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": it["id"],
                                                          "output_index": k, "content_index": 0, "delta": r.text}))
            ev.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": k,
                                                     "item": it}))
        ev.append(("response.completed", {"type": "response.completed", "response": resp}))
        self._sse(ev)

    # -- Anthropic Messages ------------------------------------------------------------
    def _anthropic(self, r: Reply, stream: bool, body: dict) -> None:
        mid = f"msg_{self.server.next_id()}"
        blocks: list[dict[str, Any]] = []
        if r.reasoning and body.get("thinking"):
            blocks.append({"type": "thinking", "thinking": r.reasoning, "signature": "sig"})
        if r.text:
            blocks.append({"type": "text", "text": r.text})
        if r.call:
            blocks.append({"type": "tool_use", "id": f"toolu_{self.server.next_id()}", "name": r.call[0],
                           "input": json.loads(r.call[1])})
        stop = "tool_use" if r.call else "end_turn"
        usage = {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 0,
                 "cache_creation_input_tokens": 0}
        msg = {"id": mid, "type": "message", "role": "assistant", "model": body.get("model", "scripted"),
               "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not stream:
            return self._json(msg)
        ev: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start",
                                                               "message": {**msg, "content": [], "stop_reason": None}})]
        for k, b in enumerate(blocks):
            start = {**b, "input": {}} if b["type"] == "tool_use" else (
                {"type": "text", "text": ""} if b["type"] == "text" else {"type": "thinking", "thinking": ""})
            ev.append(("content_block_start", {"type": "content_block_start", "index": k, "content_block": start}))
            if b["type"] == "text":
                delta = {"type": "text_delta", "text": b["text"]}
            elif b["type"] == "thinking":
                ev.append(("content_block_delta", {"type": "content_block_delta", "index": k,
                                                   "delta": {"type": "thinking_delta", "thinking": b["thinking"]}}))
                delta = {"type": "signature_delta", "signature": b["signature"]}
            else:
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": k, "delta": delta}))
            ev.append(("content_block_stop", {"type": "content_block_stop", "index": k}))
        ev.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 10}}))
        ev.append(("message_stop", {"type": "message_stop"}))
        self._sse(ev)


    # -- Gemini generateContent ---------------------------------------------------------
    def _gemini(self, r: Reply, stream: bool, body: dict) -> None:
        """``models/*:generateContent`` and ``:streamGenerateContent?alt=sse`` (Gemini CLI's
        ``GOOGLE_GEMINI_BASE_URL``). A request asking for JSON (``responseMimeType``: its
        next-speaker and routing checks) is answered with an empty object."""
        cfg = body.get("generationConfig") if isinstance(body.get("generationConfig"), dict) else {}
        parts: list[dict[str, Any]] = []
        if cfg.get("responseMimeType") == "application/json":
            parts.append({"text": "{}"})
        else:
            if r.reasoning:
                parts.append({"text": r.reasoning, "thought": True})
            if r.text:
                parts.append({"text": r.text})
            if r.call:
                parts.append({"functionCall": {"name": r.call[0], "args": json.loads(r.call[1])}})
        resp = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
                "modelVersion": "scripted", "responseId": f"r{self.server.next_id()}"}
        if not stream:
            return self._json(resp)
        self._sse([(None, resp)])


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, file_path: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.log: list[Logged] = []
        self.file_path = file_path
        self._n = 0
        #: report a chat request's prompt tokens as its size / 4, not 100 (Qwen Code keeps a
        #: compression only when the tokens it saves exceed the summary's, by the reported usage)
        self.usage_by_size = False
        #: a chat request's prompt tokens as the test scripts them (OpenCode compacts by itself when
        #: the last response's tokens pass the model's limit: they must drop after the compaction,
        #: as a real model's do, or it compacts again after every reply)
        self.prompt_tokens: Callable[[dict[str, Any]], int] | None = None
        #: a chat request's cached prompt tokens as the test scripts them (``prompt_tokens_details``,
        #: where llama-server reports the tokens it reused): what an agent that records them keeps
        self.cached_tokens: Callable[[dict[str, Any]], int] | None = None

    def next_id(self) -> int:
        with self.lock:
            self._n += 1
            return self._n


@dataclass
class ModelServer:
    """``with ModelServer(file_path) as m:`` — ``m.url``, ``m.log`` (every request, in order)."""

    file_path: str = "/tmp/hello.txt"
    usage_by_size: bool = False  # see ``_Server.usage_by_size``
    prompt_tokens: Callable[[dict[str, Any]], int] | None = None  # see ``_Server.prompt_tokens``
    cached_tokens: Callable[[dict[str, Any]], int] | None = None  # see ``_Server.cached_tokens``
    _srv: _Server | None = field(default=None, init=False)

    def __enter__(self) -> "ModelServer":
        self._srv = _Server(self.file_path)
        self._srv.usage_by_size = self.usage_by_size
        self._srv.prompt_tokens = self.prompt_tokens
        self._srv.cached_tokens = self.cached_tokens
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._srv is not None
        self._srv.shutdown()
        self._srv.server_close()

    @property
    def url(self) -> str:
        assert self._srv is not None
        return f"http://127.0.0.1:{self._srv.server_address[1]}"

    @property
    def log(self) -> list[Logged]:
        assert self._srv is not None
        with self._srv.lock:
            return list(self._srv.log)
