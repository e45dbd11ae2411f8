"""The first byte through ``replayer record`` against the direct one, many times (goal: ≤ 5 ms later).

    python benchmarks/proxy_first_byte.py [REPEATS] [TREE]   # TREE: a replayer checkout to run the proxy from

Why beside ``proxy_overhead.py firstbyte``: there the scripted upstream is a process of its own
that busy-waits its 1 ms pacing, and on a loaded machine its wake-up for each new request waits
behind the other processes — tens of ms either way, on both sides. Here the upstream is a thread
of this process, pacing with ``sleep``, so what differs between the two sides is the proxy's hop
(its process, its accept, its upstream connection). Short streams (20 chunks) let many requests
fit in a minute; the proxy runs as ``replayer record`` in its own process, as a user runs it;
direct and proxied requests alternate; one httpx client built before any span and no keep-alive
(each request opens its client connection, both sides alike). TREE (default: this checkout)
runs another version's proxy with the same measurement, for a before/after.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
N_CHUNKS = 20


class _Stream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(N_CHUNKS):
            data = b'data: {"choices":[{"delta":{"content":" tok%d"}}]}\n\n' % i
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            time.sleep(0.001)
        final = b'data: {"choices":[],"timings":{"cache_n":0,"prompt_n":5}}\n\ndata: [DONE]\n\n'
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(final), final))
        self.wfile.flush()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_byte_ms(c: httpx.Client, url: str) -> float:
    t0 = time.perf_counter()
    first = None
    with c.stream("POST", url + "/completion", json={"prompt": "hi", "stream": True}) as r:
        for _ in r.iter_raw():
            if first is None:
                first = time.perf_counter()
    assert first is not None
    return (first - t0) * 1000


def measure(repeats: int, tree: Path) -> dict[str, float]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{srv.server_address[1]}"
    port = _free_port()
    log = Path(tempfile.mkdtemp()) / "traffic.jsonl"
    proxy = subprocess.Popen([sys.executable, "-m", "replayer.cli", "record", "--upstream", upstream, "--listen",
                              f"127.0.0.1:{port}", "--out", str(log)], cwd=tree, stderr=subprocess.PIPE, text=True)
    try:
        if "logging to" not in (proxy.stderr.readline() if proxy.stderr else ""):
            raise SystemExit("the proxy did not start")
        via = f"http://127.0.0.1:{port}"
        res: dict[str, list[float]] = {"direct": [], "proxy": []}
        with httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as c:
            _first_byte_ms(c, upstream)  # warm-up: the proxy's imports, its first upstream connection
            _first_byte_ms(c, via)
            for k in range(repeats):
                for name, url in (("direct", upstream), ("proxy", via))[::1 if k % 2 else -1]:
                    res[name].append(_first_byte_ms(c, url))
    finally:
        proxy.terminate()
        proxy.wait(30)
        srv.shutdown()
    d, p = statistics.median(res["direct"]), statistics.median(res["proxy"])
    return {"direct": d, "proxy": p, "delta": p - d}


def main(argv: list[str]) -> None:
    repeats = int(argv[0]) if argv else 60
    tree = Path(argv[1]).resolve() if len(argv) > 1 else REPO
    r = measure(repeats, tree)
    print(f"{tree}: first byte median of {repeats} each way: direct {r['direct']:.2f} ms, proxy {r['proxy']:.2f} ms, "
          f"{r['delta']:+.2f} ms; load average {os.getloadavg()[0]:.1f}, cpus {os.cpu_count()}")


if __name__ == "__main__":
    main(sys.argv[1:])
