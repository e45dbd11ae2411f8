"""Peak memory (RSS) of a replay against the size of the session file.

    python benchmarks/memory.py [--mb 200] [--message-mb 50] [--keep]

Writes two pi sessions into a temporary folder (never into the repo): one of ``--mb`` MB
made of ordinary turns (tool calls and ~20 KB tool results), one whose single user message is
``--message-mb`` MB. Each is replayed by a fresh ``replayer replay FILE --json`` (import,
request, layout with the estimate tokenizer, schedule and simulate of builds A and B) and by
``replayer inspect FILE --json``; the peak RSS of that process is read from the kernel
(``ru_maxrss`` of the waited child). Goals: the session within 3× its size, the message
within 4×. Record results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

WORDS = ("the of and to in is for on that with as this file path value error batch token server slot cache "
         "import return def class self none true false print config load read write open close").split()


def _text(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def big_session(path: Path, mb: float, seed: int = 5) -> Path:
    """A pi v3 session of about ``mb`` MB: user → assistant tool call → ~20 KB tool result."""
    rng = random.Random(seed)
    target = int(mb * 1e6)
    parent = None
    n = 0
    model = {"api": "openai-completions", "provider": "llamacpp", "model": "m"}
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "session", "version": 3, "id": "mem", "timestamp": "2026-07-01T09:00:00.000Z",
                             "cwd": "/b"}) + "\n")

        def entry(message: dict) -> None:
            nonlocal parent, n
            n += 1
            eid = f"e{n}"
            fh.write(json.dumps({"type": "message", "id": eid, "parentId": parent,
                                 "timestamp": "2026-07-01T09:00:01.000Z", "message": message},
                                separators=(",", ":")) + "\n")
            parent = eid

        call = 0
        while fh.tell() < target:
            if call % 50 == 0:
                entry({"role": "user", "content": _text(rng, 400)})
            call += 1
            entry({"role": "assistant", "content": [
                {"type": "text", "text": _text(rng, 200)},
                {"type": "toolCall", "id": f"c{call}", "name": "read", "arguments": {"path": f"src/f{call}.py"}}],
                **model, "stopReason": "toolUse"})
            entry({"role": "toolResult", "toolCallId": f"c{call}", "toolName": "read",
                   "content": [{"type": "text", "text": _text(rng, rng.randint(10_000, 30_000))}], "isError": False})
    return path


def big_message(path: Path, mb: float, seed: int = 6) -> Path:
    """A pi v3 session whose one user message is ``mb`` MB of text."""
    rng = random.Random(seed)
    rows = [{"type": "session", "version": 3, "id": "msg", "timestamp": "2026-07-01T09:00:00.000Z", "cwd": "/b"},
            {"type": "message", "id": "m1", "parentId": None, "timestamp": "2026-07-01T09:00:01.000Z",
             "message": {"role": "user", "content": _text(rng, int(mb * 1e6))}}]
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows), encoding="utf-8")
    return path


def peak_rss(argv: list[str]) -> tuple[int, float, int]:
    """(peak RSS in bytes, wall seconds, exit status) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if r.returncode != 0:
        print(r.stderr.strip(), file=sys.stderr)
    if after <= before:  # ru_maxrss of children is a maximum: run each in its own driver
        raise SystemExit("peak RSS not measurable: run one measurement per process (see main)")
    return after * 1024, wall, r.returncode


def measure_one(kind: str, path: str) -> None:
    argv = [sys.executable, "-m", "replayer.cli", *(["replay", path, "--json"] if kind == "replay"
                                                    else ["inspect", path, "--json"])]
    rss, wall, rc = peak_rss(argv)
    print(json.dumps({"rss": rss, "wall": wall, "rc": rc}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--message-mb", type=float, default=50)
    ap.add_argument("--keep", action="store_true", help="leave the generated files in the temp folder")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return measure_one(*args.one)
    tmp = Path(tempfile.mkdtemp(prefix="replayer-mem-"))
    cases = [("session", big_session(tmp / "big-session.jsonl", args.mb), 3.0),
             ("one message", big_message(tmp / "big-message.jsonl", args.message_mb), 4.0)]
    print(f"| file | size | command | peak RSS | × size | goal | met | time |\n|---|---:|---|---:|---:|---|---|---:|")
    for name, path, goal in cases:
        size = path.stat().st_size
        for kind in ("inspect", "replay"):
            # a fresh driver per measurement: ru_maxrss of children is the maximum over all of them
            r = subprocess.run([sys.executable, __file__, "--one", kind, str(path)], capture_output=True, text=True,
                               cwd=ROOT)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            ratio = res["rss"] / size
            print(f"| {name} | {size / 1e6:.0f} MB | {kind} --json | {res['rss'] / 1e6:,.0f} MB | {ratio:.2f}× "
                  f"| ≤ {goal:g}× | {'yes' if ratio <= goal else 'no'} | {res['wall']:.1f} s |", flush=True)
    if args.keep:
        print(f"files kept in {tmp}")
    else:
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    main()
