"""A loopback stand-in for llama-server that misbehaves on purpose (fault injection only).

The real builds are the reference for everything a run measures; this server exists for the
faults a real build will not produce on demand: a stream cut short, a malformed reply, a
keep-alive trickle, silence. Its healthy replies follow the shapes of llama.cpp's
``tools/server`` (``/health``, ``/props``, ``/apply-template``, ``/tokenize`` with one token
per byte, and a ``return_progress`` stream of 64-token batches ending in ``data: [DONE]``).

In-process: ``FakeServer(scenario)`` (a context manager with ``.url``). As a fake
``llama-server`` binary: ``python fake_llama_server.py SCENARIO --port N …`` (``write_binary``
makes the executable wrapper that also answers ``--version``).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n{% endfor %}"
          "<|im_start|>assistant\n")
BATCH = 64

#: what each scenario breaks (``ok`` breaks nothing)
SCENARIOS = (
    "ok", "eof_early", "eof_after_prefill", "error_midway", "error_after_prefill", "bad_json", "progress_nan",
    "http500_list", "keepalive", "silent_stream", "props_list", "template_not_json", "silent", "loading",
    "slow_layout",
)


def render(messages: list[dict]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages) + \
        "<|im_start|>assistant\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # every reply ends by closing the connection
    scenario = "ok"
    stopping = threading.Event()

    def log_message(self, *args) -> None:  # quiet
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: that is the test
            pass

    def _hang(self) -> None:
        while not self.stopping.wait(0.1):
            pass

    def _json(self, obj, status: int = 200, raw: bytes | None = None) -> None:
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def do_GET(self) -> None:
        if self.scenario == "silent":
            return self._hang()
        if self.path == "/health":
            if self.scenario == "loading":  # answers, but its model never finishes loading
                return self._json({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
                                  503)
            return self._json({"status": "ok"})
        if self.path == "/props":
            if self.scenario == "props_list":
                return self._json([])
            return self._json({"chat_template": CHATML, "bos_token": "", "eos_token": "<|im_end|>",
                               "default_generation_settings": {"n_ctx": 65536}})
        self._json({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)

    def do_POST(self) -> None:
        if self.scenario == "silent":
            return self._hang()
        body = self._body()
        if self.path == "/apply-template":
            if self.scenario == "slow_layout":  # healthy, but the prompt's layout never comes back
                return self._hang()
            if self.scenario == "template_not_json":
                return self._json(None, raw=b"<html>500 oops</html>")
            return self._json({"prompt": render(body["messages"])})
        if self.path == "/tokenize":
            return self._json({"tokens": list(body["content"].encode())})
        if self.path == "/v1/chat/completions":
            return self._stream(len(render(body["messages"]).encode()))
        self._json({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}, 404)

    def _send(self, text: str) -> None:
        self.wfile.write(text.encode())
        self.wfile.flush()

    def _event(self, obj) -> None:
        self._send(f"data: {json.dumps(obj)}\n\n")

    def _progress(self, n: int, upto: int) -> None:
        for p in [0, *range(BATCH, upto, BATCH), upto]:
            self._event({"choices": [], "prompt_progress": {"total": n, "cache": 0, "processed": p,
                                                             "time_ms": p // 8}})

    def _stream(self, n: int) -> None:
        s = self.scenario
        if s == "http500_list":
            return self._json(None, 500, raw=b'[{"error": "a list, not an object"}, 2]')
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if s == "silent_stream":
            return self._hang()
        if s == "keepalive":
            while not self.stopping.wait(0.2):
                self._send(": keepalive\n\n")
            return
        if s == "progress_nan":
            return self._event({"prompt_progress": {"total": n, "cache": 0, "processed": "lots", "time_ms": 1}})
        half = n // 2
        if s in ("eof_early", "error_midway", "bad_json"):
            self._progress(n, half)
            if s == "error_midway":
                self._event({"error": {"code": 500, "message": "boom in the middle", "type": "server_error"}})
            elif s == "bad_json":
                self._send('data: {"prompt_progress": {"total": \n\n')
            return
        self._progress(n, n)
        if s == "eof_after_prefill":
            return
        if s == "error_after_prefill":
            return self._event({"error": {"code": 500, "type": "server_error", "message":
                                          "Failed to parse input at pos 0: <tool_call> does not match the "
                                          "expected format"}})
        self._event({"choices": [{"delta": {"content": "x"}, "index": 0, "finish_reason": "length"}],
                     "timings": {"cache_n": 0, "prompt_n": n, "prompt_ms": n / 8, "prompt_per_second": 8000.0,
                                 "predicted_n": 1}})
        self._send("data: [DONE]\n\n")


class FakeServer:
    """The fake on a free loopback port, in a thread of this process."""

    def __init__(self, scenario: str) -> None:
        assert scenario in SCENARIOS, scenario
        self.stopping = threading.Event()
        handler = type("H", (Handler,), {"scenario": scenario, "stopping": self.stopping})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "FakeServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def write_binary(path: Path, scenario: str, build: int = 9859) -> Path:
    """An executable fake ``llama-server`` that serves ``scenario`` on the ``--port`` it is given."""
    path.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: {build} (fake)' >&2; exit 0; fi\n"
                    f"exec {sys.executable} {Path(__file__).resolve()} {scenario} \"$@\"\n")
    path.chmod(0o755)
    return path


def main(argv: list[str]) -> None:
    scenario, args = argv[0], argv[1:]
    port = int(args[args.index("--port") + 1])
    handler = type("H", (Handler,), {"scenario": scenario, "stopping": threading.Event()})
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    httpd.daemon_threads = True
    print("main: server is listening on 127.0.0.1", file=sys.stderr, flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
