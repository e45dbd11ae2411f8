#!/usr/bin/env python3
"""Send a replayed session's requests to a stock llama-server and print what it did with each.

Written by `replayer export --repro`; needs nothing but Python 3.8+ (no packages). Start
llama-server with the command line in README.md, then:

    python3 repro.py --url http://127.0.0.1:8080 --expect A

Each request of requests.jsonl is sent in order, streamed with `return_progress` and
`max_tokens: 1`, so the one sampled token never enters the cache and the next request meets the
previous prompt. Per request it prints the tokens the server reused (`timings.cache_n`), the
tokens it processed (`timings.prompt_n`), the batches its progress stream reported and the
prompt time. With --expect A (or B) it compares against that run of the replay the bundle came
from (expected.json) and exits 1 when any request differs.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def read_requests(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def send(url, req, timeout):
    """One streamed request; returns its facts (cache_n, prompt_n, batches, prompt_ms, error)."""
    body = dict(req["body"], max_tokens=1, stream=True, return_progress=True, cache_prompt=True, temperature=0)
    data = json.dumps(body).encode("utf-8")
    http = urllib.request.Request(url.rstrip("/") + req["endpoint"], data=data,
                                  headers={"Content-Type": "application/json"}, method="POST")
    out = {"index": req["index"], "cache_n": None, "prompt_n": None, "batches": [], "prompt_ms": None, "error": None}
    prev = None
    try:
        with urllib.request.urlopen(http, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if chunk.get("error"):
                    err = chunk["error"]
                    out["error"] = err.get("message") if isinstance(err, dict) else str(err)
                pp = chunk.get("prompt_progress")
                if pp is not None:
                    p = int(pp["processed"])
                    if prev is not None and p > prev:
                        out["batches"].append(p - prev)
                    prev = p if prev is None or p > prev else prev
                tm = chunk.get("timings")
                if tm and tm.get("prompt_n") is not None:
                    out["cache_n"] = int(tm.get("cache_n") or 0)
                    out["prompt_n"] = int(tm["prompt_n"])
                    out["prompt_ms"] = float(tm.get("prompt_ms") or 0.0)
    except urllib.error.HTTPError as exc:
        out["error"] = "HTTP %d: %s" % (exc.code, exc.read()[:300].decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
    return out


def compare(got, want):
    """The fields that differ between a request's facts and the replay's."""
    return [k for k in ("cache_n", "prompt_n") if got.get(k) != want.get(k)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="the llama-server to send to")
    ap.add_argument("--expect", choices=("A", "B"), help="compare with this run of the replay (expected.json)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--json", action="store_true", help="one JSON object per request instead of a table")
    args = ap.parse_args(argv)
    reqs = read_requests(os.path.join(HERE, "requests.jsonl"))
    want = {}
    if args.expect:
        with open(os.path.join(HERE, "expected.json"), encoding="utf-8") as f:
            run = json.load(f)["runs"][args.expect]
        want = {r["index"]: r for r in run["requests"]}
        print("comparing with run %s: %s" % (args.expect, run["label"]), file=sys.stderr)
    if not args.json:
        print("%4s %-9s %8s %8s %8s %8s %10s  %s" % ("req", "thread", "n_prompt", "cache_n", "prompt_n",
                                                   "batches", "prompt_ms", "expected cache_n/prompt_n"))
    n_diff = n_err = 0
    for req in reqs:
        got = send(args.url, req, args.timeout)
        w = want.get(req["index"])
        diff = compare(got, w) if w else []
        n_diff += bool(diff)
        n_err += got["error"] is not None and got["prompt_n"] is None
        if args.json:
            print(json.dumps(dict(got, thread=req.get("thread") or "main", differs=diff)))
            continue
        exp = "%s/%s %s" % (w["cache_n"], w["prompt_n"], "DIFFERS" if diff else "ok") if w else ""
        print("%4d %-9s %8s %8s %8s %8d %10s  %s" % (
            req["index"], str(req.get("thread") or "main")[:9], req.get("n_prompt", ""), got["cache_n"], got["prompt_n"],
            len(got["batches"]), "" if got["prompt_ms"] is None else "%.1f" % got["prompt_ms"], exp))
        if got["error"]:
            print("     error: %s" % got["error"][:200])
    total = len(reqs)
    if args.expect:
        print("%d of %d requests as in run %s" % (total - n_diff, total, args.expect), file=sys.stderr)
    if n_err:
        print("%d of %d requests failed" % (n_err, total), file=sys.stderr)
    return 1 if n_diff or n_err else 0


if __name__ == "__main__":
    sys.exit(main())
