"""In-process stand-ins for the recording proxy's fault tests: a scripted upstream and the proxy
run on a background event loop. The upstream exists for faults a real build will not produce
on demand (a stream cut short, a non-JSON reply, a stream the client walks away from); the
live test (test_record_live.py) checks the proxy against real builds."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

from replayer.core.record.proxy import RecordingProxy, Upstream
from replayer.core.record.traffic_log import TrafficLog

TIMINGS = {"cache_n": 7, "prompt_n": 5, "prompt_ms": 1.5, "predicted_n": 3, "predicted_ms": 2.5}


class Script:
    """What the upstream saw and the knobs a test turns."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()  # the 'held' stream waits for this after its first chunk
        self.client_gone = threading.Event()  # set when a write to the proxy failed
        self.n_chunks = 20
        self.peers: list[int] = []  # each request's connection, numbered as accepted (which one was reused)
        self.accepted = itertools.count()
        self.drop_reused = False  # close a reused connection on its next request, unanswered (a keep-alive timeout's race)


class Upstream1(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: Script

    def log_message(self, *args) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.conn_no = next(self.script.accepted)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b'{"status":"ok"}')
        else:
            self._send(404, b'{"error":{"code":404,"message":"File Not Found"}}')

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        self.served = getattr(self, "served", 0) + 1  # one handler a connection: its requests so far
        self.script.peers.append(self.conn_no)
        if self.script.drop_reused and self.served > 1:
            self.close_connection = True
            return self.connection.shutdown(2)
        self.script.bodies.append(raw)
        self.script.headers.append({k.lower(): v for k, v in self.headers.items()})
        if self.path == "/nonjson":
            return self._send(200, b"<html>not json</html>", "text/html")
        if self.path == "/echo-size":
            return self._send(200, json.dumps({"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
                                               "timings": TIMINGS}).encode())
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(500, b'{"error":{"code":500,"message":"[json.exception.parse_error.101] parse error",'
                                   b'"type":"server_error"}}')
        if body.get("fault") == "close-after":  # answered, then the connection closed (no "connection: close")
            self.close_connection = True
        if body.get("fault") == "html":
            return self._send(502, b"<html><body>Bad gateway</body></html>", "text/html")
        if not body.get("stream"):
            doc = {"id_slot": 1, "choices": [{"message": {"content": "hi"}}], "timings": TIMINGS}
            if body.get("fault") == "no-slot":  # as b9859 answers: no id_slot
                del doc["id_slot"]
            if self.path == "/v1/responses":
                doc = {"object": "response", "output": [], "usage": {"input_tokens": 5}}
            return self._send(200, json.dumps(doc).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        mode = body.get("fault", "")
        try:
            for i in range(self.script.n_chunks):
                self._chunk(b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i)
                if i == 0 and mode == "held":
                    self.script.release.wait(10)
                if mode == "cut" and i == 3:
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                if mode == "slow":
                    time.sleep(0.05)
            if self.path == "/v1/responses":
                final = {"type": "response.completed", "response": {"usage": {"input_tokens": 5}, "timings": TIMINGS}}
                self._chunk(b"event: response.completed\ndata: " + json.dumps(final).encode() + b"\n\n")
            else:
                final = {"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": TIMINGS, "id_slot": 0}
                self._chunk(b"data: " + json.dumps(final).encode() + b"\n\n")
                self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.script.client_gone.set()
            self.close_connection = True


@contextmanager
def upstream() -> Iterator[tuple[str, Script]]:
    script = Script()
    handler = type("H", (Upstream1,), {"script": script})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", script
    finally:
        srv.shutdown()
        srv.server_close()


class RunningProxy:
    def __init__(self, url: str, log_path: Path, proxy: RecordingProxy, loop: asyncio.AbstractEventLoop) -> None:
        self.url, self.log_path, self.proxy, self.loop = url, log_path, proxy, loop

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def wait_lines(self, n: int, timeout: float = 5.0) -> list[dict]:
        """The log once it holds ``n`` lines (a line is written when its exchange ends)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.log_path.exists() and self.log_path.read_bytes().count(b"\n") >= n:  # whole lines only
                break
            time.sleep(0.01)
        return self.lines()


@contextmanager
def proxy_to(upstream_url: str, log_path: Path, **kw) -> Iterator[RunningProxy]:
    """The proxy on its own event loop thread, in front of ``upstream_url``."""
    log = TrafficLog(log_path)
    proxy = RecordingProxy(Upstream.parse(upstream_url), log, **kw)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        box["url"] = loop.run_until_complete(proxy.start())
        ready.set()
        task = loop.create_task(proxy.serve())
        box["task"] = task
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            pass
        loop.run_until_complete(proxy.close())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    ready.wait(5)
    try:
        yield RunningProxy(box["url"], log_path, proxy, loop)
    finally:
        loop.call_soon_threadsafe(box["task"].cancel)
        t.join(5)
        loop.close()
        log.close()
