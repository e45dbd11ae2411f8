"""What ``replayer record`` adds to a streamed 1,000-token completion (goal: ≤ 2 % of the direct
time, first byte ≤ 5 ms later).

    python benchmarks/proxy_overhead.py scripted [REPEATS]   # an upstream that streams 1,000 chunks, 1 ms apart
    python benchmarks/proxy_overhead.py firstbyte [REPEATS]  # the same upstream, 20 chunks: the first byte, many times
    python benchmarks/proxy_overhead.py real [REPEATS [THREADS]]  # llama-server b9859, tiny llama GGUF, 1,000 tokens
    … --watch   # the proxy of ``replayer watch --lines`` instead (on a thread, beside the predictor's)

The proxy runs as ``replayer record`` in its own process, as a user runs it; direct and
proxied requests alternate so a slow spell of the shared machine hits both. Prints a table:
median total and first-byte times, direct and through the proxy, and the overhead.
The numbers are in docs/benchmarks.md ("Recording proxy overhead").
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

N_TOKENS = 1000
REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Script(BaseHTTPRequestHandler):
    """1,000 SSE chunks shaped like llama-server's, one per millisecond, then the final chunk."""

    n_tokens = N_TOKENS
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else the first chunk waits for the client's delayed ACK of the headers

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        t = time.perf_counter()
        for i in range(self.n_tokens):
            data = b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" tok%d"}}],' \
                   b'"created":1,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}\n\n' % i
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            t += 0.001
            while time.perf_counter() < t:
                pass
        final = b'data: {"choices":[],"timings":{"cache_n":0,"prompt_n":5}}\n\ndata: [DONE]\n\n'
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(final), final))
        self.wfile.flush()


def serve_script(port: int, n_tokens: int = N_TOKENS) -> None:
    handler = type("Script", (_Script,), {"n_tokens": n_tokens})
    ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()


def _wait_port(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def _one(c: httpx.Client, url: str, body: dict, path: str = "/completion") -> tuple[float, float, int]:
    """(first byte ms, total ms, chunks) of one streamed request with the client ``c`` (built once,
    outside every span: constructing an httpx client loads the CA bundle, tens of ms under load,
    and would be counted in the first byte of whichever side paid it). ``c`` keeps no idle
    connection (the server closes one after 5 s of keep-alive, and httpx does not retry a POST),
    so direct and proxied requests each open a new client connection: both sides are measured
    the same way."""
    t0 = time.perf_counter()
    first = None
    n = 0
    with c.stream("POST", url + path, json=body) as r:
        for _ in r.iter_raw():
            if first is None:
                first = time.perf_counter()
            n += 1
    t1 = time.perf_counter()
    return (first - t0) * 1000, (t1 - t0) * 1000, n


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc): what the proxy costs whatever the machine's load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


WATCH = False  # --watch: measure ``replayer watch --lines`` instead of ``replayer record``


def measure(upstream: str, body: dict, repeats: int) -> dict:
    port = _free_port()
    log = Path(tempfile.mkdtemp()) / "traffic.jsonl"
    cmd = ["watch", "--lines", "--tokenizer", "estimate"] if WATCH else ["record"]
    proxy = subprocess.Popen([sys.executable, "-m", "replayer.cli", *cmd, "--upstream", upstream, "--listen",
                              f"127.0.0.1:{port}", "--out", str(log)], stderr=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, cwd=REPO)
    try:
        _wait_port(port)
        via = f"http://127.0.0.1:{port}"
        res: dict[str, list[tuple[float, float, int]]] = {"direct": [], "proxy": []}
        with httpx.Client(timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as c:
            _one(c, upstream, body)  # warm-up (the server's first request, the proxy's imports)
            _one(c, via, body)
            cpu0 = _cpu_s(proxy.pid)
            for k in range(repeats):
                for name, url in (("direct", upstream), ("proxy", via))[::1 if k % 2 else -1]:
                    res[name].append(_one(c, url, body))
            cpu = _cpu_s(proxy.pid) - cpu0
    finally:
        proxy.terminate()
        proxy.wait(10)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    med = {n: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for n, v in res.items()}
    return {"direct": med["direct"], "proxy": med["proxy"], "lines": len(lines), "repeats": repeats,
            "chunks": statistics.median(r[2] for r in res["proxy"]),
            "overhead_pct": (med["proxy"][1] / med["direct"][1] - 1) * 100,
            "first_byte_ms": med["proxy"][0] - med["direct"][0],
            "cpu_us_per_chunk": cpu * 1e6 / sum(r[2] for r in res["proxy"])}


def scripted(repeats: int, n_tokens: int = N_TOKENS) -> dict:
    """The scripted upstream in its own process. ``firstbyte`` runs it with 20 chunks: a 1 s busy
    stream makes the upstream's next wake-up wait behind the machine's other work, and with 20
    chunks many more first bytes fit in the same minutes (the median the goal is about)."""
    port = _free_port()
    up = subprocess.Popen([sys.executable, __file__, "serve-script", str(port), str(n_tokens)])
    try:
        _wait_port(port)
        return measure(f"http://127.0.0.1:{port}", {"prompt": "hi", "stream": True, "n_predict": n_tokens}, repeats)
    finally:
        up.terminate()
        up.wait(10)


def real(repeats: int, threads: int | None = None) -> dict:
    sys.path.insert(0, str(REPO))
    from replayer.core.builds.manager import resolve_binary
    from replayer.core.engine.live import LiveOptions, LiveServer
    from replayer.core.runspec import Knobs
    from replayer.core.tiny_models import make_tiny

    binary = Path(resolve_binary("9859", "cpu").binary)  # an installed build; never compiled here
    model = make_tiny("llama", Path(tempfile.mkdtemp()) / "llama.gguf")
    extra = ["-t", str(threads), "-tb", str(threads)] if threads else []
    with LiveServer(LiveOptions(binary=binary, model=model, ctx_size=4096, extra_args=extra), Knobs(), 4096) as server, \
            httpx.Client() as c:
        server.wait_healthy(c)
        # /completion: the tiny random model's text would fail the chat endpoint's output parser
        body = {"prompt": "The user asked the assistant", "stream": True, "n_predict": N_TOKENS, "ignore_eos": True,
                "temperature": 0, "seed": 1, "grammar": "root ::= [a-z ]+"}  # plain text: no parser error
        return measure(server.url, body, repeats)


def main(argv: list[str]) -> None:
    global WATCH
    if argv[:1] == ["serve-script"]:
        return serve_script(int(argv[1]), int(argv[2]) if len(argv) > 2 else N_TOKENS)
    WATCH = "--watch" in argv
    argv = [a for a in argv if a != "--watch"]
    mode = argv[0] if argv else "scripted"
    if mode not in ("scripted", "firstbyte", "real"):
        raise SystemExit(f"proxy_overhead.py: mode is scripted, firstbyte or real, not {mode!r}")
    repeats = int(argv[1]) if len(argv) > 1 else (60 if mode == "firstbyte" else 10)
    threads = int(argv[2]) if len(argv) > 2 else None
    n_tokens = 20 if mode == "firstbyte" else N_TOKENS
    r = real(repeats, threads) if mode == "real" else scripted(repeats, n_tokens)
    print(f"{mode}{f' -t {threads}' if threads else ''}{' (watch)' if WATCH else ''}: {repeats} streamed "
          f"{n_tokens}-token completions each way, {r['chunks']:.0f} chunks, {r['lines']} log lines, "
          f"cpus {os.cpu_count()}")
    print(f"{'':8} {'first byte ms':>14} {'total ms':>10}")
    for name in ("direct", "proxy"):
        print(f"{name:8} {r[name][0]:>14.2f} {r[name][1]:>10.1f}")
    print(f"overhead {r['first_byte_ms']:>+14.2f} {r['overhead_pct']:>+9.2f} %")
    print(f"proxy CPU per chunk {r['cpu_us_per_chunk']:.0f} µs; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
