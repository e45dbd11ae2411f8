"""Every ``replay`` output, byte for byte, of this tree against a reference git ref.

    python benchmarks/outputs_identical.py                 # against main
    python benchmarks/outputs_identical.py --ref eea5b87   # against a commit
    python benchmarks/outputs_identical.py --quick         # two option sets, no 2,000-message session
    python benchmarks/outputs_identical.py --server        # the server paths (``--server-args``) only

Why: a refactor of the replay pipeline (issue 20) must not change what a user reads. The script
checks the reference ref out in a temporary ``git worktree``, runs the same cases in both trees
(each tree in its own process, ``replayer.cli.main`` called in-process for each case so ~2,000
cases take minutes, not an hour of interpreter start-ups), and compares exit code, stdout and
stderr of every case. Cases: every session under fixtures/ and tests/data/samples/, the shared
samples when ``../shared`` (or ``$REPLAYER_SHARED``) exists, and the benchmarks' 2,000-message
session; ``--mode resume`` and ``--mode session``; ``--json``, ``--jsonl``, ``--markdown`` and
text; a set of option combinations. Prints a table and the first differing cases; exit 1 when
any case differs.

``--server``: the paths the cases above do not take, ``replay --mode session --server-args``
(``server.slots``, the host cache, ``server.why``): generated sessions with subagent threads
(Claude Code 2.1 files with per-agent files, ``traffic.agent_stream`` logs) and the 2,000-message
sessions, × server command lines (slots, host-cache limits that evict with a GGUF's state sizes,
no unified KV, checkpoints, batch sizes) × tiny plain, SWA and hybrid GGUFs (``tiny_models``) ×
two templates (no GGUF) × two build pairs, ``--json`` (every turn's batches, checkpoints, slot and why).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Option combinations, each run in both modes and all four formats. The first is the defaults.
OPTION_SETS: list[tuple[str, list[str]]] = [
    ("defaults", []),
    ("builds G1-G3", ["--a", "G1", "--b", "G3"]),
    ("batch 512/256", ["-b", "512", "-ub", "256"]),
    ("cms 256, 3 checkpoints", ["--cms", "256", "--ctx-checkpoints", "3"]),
    ("model llama-8b, rtx3090", ["--model", "llama-8b-q4_0", "--gpu", "rtx3090"]),
    ("model gpt-oss-20b, cpu", ["--model", "gpt-oss-20b", "--gpu", "cpu-generic"]),
    ("template chatml", ["--template", "chatml"]),
    ("no redaction", ["--no-redact"]),
    ("redact text", ["--redact-text"]),
]
#: What-ifs of the session mode only.
SESSION_ONLY: list[tuple[str, list[str]]] = [
    ("freeze system prompt", ["--freeze-system-prompt"]),
    ("keep reasoning", ["--keep-reasoning"]),
]
FORMATS = [("json", ["--json"]), ("jsonl", ["--jsonl"]), ("markdown", ["--markdown"]), ("text", [])]
SKIP_SUFFIXES = (".md", ".py", ".EXPECTED-openai-messages.json")


def sessions(big: Path | None) -> list[Path]:
    """Every session file (and opencode storage folder) the suite and the samples hold."""
    roots = [ROOT / "fixtures", ROOT / "tests" / "data" / "samples"]
    shared = Path(os.environ.get("REPLAYER_SHARED", ROOT.parent / "shared")) / "samples"
    if shared.is_dir():
        roots.append(shared)
    seen: set[str] = set()
    out: list[Path] = []
    for root in roots:
        for p in sorted(root.rglob("*")):
            if "storage" in p.parts and p.name != "storage":
                continue  # an opencode storage folder is one session
            if not (p.is_file() or p.name == "storage") or p.name.endswith(SKIP_SUFFIXES):
                continue
            key = _digest(p)
            if key not in seen:
                seen.add(key)
                out.append(p)
    if big is not None:
        out.append(big)
    return out


def _digest(p: Path) -> str:
    if p.is_dir():
        return "dir:" + p.name + ":" + ",".join(sorted(str(f.relative_to(p)) for f in p.rglob("*")))
    return hashlib.sha256(p.read_bytes()).hexdigest()


#: The server command lines of ``--server`` (None: no ``--server-args``, the one-slot replay).
SERVER_ARGS: list[str | None] = [None, "", "-np 2", "-np 2 --cache-ram 0 --no-kv-unified", "--cache-ram 1",
                                 "--ctx-checkpoints 3 -cms 64", "-b 512 -ub 256"]


def server_cases(work: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) of the server-path cases, their sessions and GGUFs written under ``work``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import random

    from run import big_session  # noqa: E402
    from slots_session import subagent_files  # noqa: E402

    from replayer.core.server.traffic import agent_stream
    from replayer.core.tiny_models import make_tiny

    small = [subagent_files(work / "claude-300", 300, 6, random.Random(7))]
    for n, burst, words in ((62, 5, 60), (200, 8, 40)):
        log = work / f"stream-{n}.jsonl"
        log.write_text("".join(json.dumps(b) + "\n" for b in agent_stream(n, burst=burst, words=words)))
        small.append(log)
    big = [subagent_files(work / "claude-2000", 2000, 10, random.Random(5)), big_session(work / "pi-2000.jsonl")]
    models = [None] + [make_tiny(a, work / f"{a}.gguf") for a in ("llama", "gemma2", "lfm2")]
    out = []
    for p in small + big:
        for args in SERVER_ARGS if p in small else SERVER_ARGS[:3]:
            for model in models if p in small else models[:1]:
                for tpl in ("qwen3-coder", "chatml") if p in small and model is None else ("qwen3-coder",):
                    for builds in ([], ["--a", "G1", "--b", "G3"]) if p in small else ([],):
                        argv = ["replay", str(p), "--mode", "session", "--template", tpl, *builds, "--json"]
                        argv += ["--model", str(model)] if model else []
                        argv += ["--server-args", args] if args is not None else []
                        name = f"{p.parent.name}/{p.name} | {args!r} | {model.stem if model else '-'} | {tpl} | {' '.join(builds) or 'A/B'}"
                        out.append((name, argv))
    return out


def cases(paths: list[Path], quick: bool, big: Path | None) -> list[tuple[str, list[str]]]:
    """(name, argv) of every case; the 2,000-message session gets the default options only."""
    sets = OPTION_SETS[:2] if quick else OPTION_SETS
    out = []
    for p in paths:
        for mode in ("resume", "session"):
            extra = SESSION_ONLY if mode == "session" and not quick else []
            for label, opts in (sets[:1] + extra[:1] if p == big else sets + extra):
                for fmt, flag in FORMATS:
                    argv = ["replay", str(p), "--mode", mode, *opts, *flag]
                    out.append((f"{p.name} | {mode} | {label} | {fmt}", argv))
    return out


def run_cases(tree: Path, spec: Path, out: Path) -> None:
    """In a fresh interpreter: import ``replayer`` from ``tree`` and run every case in ``spec``."""
    sys.path.insert(0, str(tree))
    from replayer import cli

    assert Path(cli.__file__).resolve().is_relative_to(tree.resolve()), cli.__file__
    results = {}
    for name, argv in json.loads(spec.read_text()):
        buf, err = io.BytesIO(), io.StringIO()
        stdout = io.TextIOWrapper(buf, encoding="utf-8", write_through=True)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(argv)
            except SystemExit as exc:  # argparse's exit 2
                rc = exc.code
            stdout.flush()
        results[name] = [rc, buf.getvalue().decode("utf-8", "replace"), err.getvalue()]
    out.write_text(json.dumps(results))


def _run_tree(tree: Path, spec: Path, out: Path) -> float:
    t = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run-cases", str(tree), str(spec), str(out)],
                   check=True, env=env, cwd=tree)
    return time.perf_counter() - t


def _first_difference(a: str, b: str) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at char {i}: ref {a[max(0, i - 40):i + 60]!r} vs new {b[max(0, i - 40):i + 60]!r}"


def compare(ref: dict, new: dict) -> list[str]:
    """One line per differing case (exit code, stdout or stderr)."""
    lines = []
    for name in ref:
        if name not in new:
            lines.append(f"{name}: missing in the new tree")
            continue
        for what, x, y in zip(("exit code", "stdout", "stderr"), ref[name], new[name]):
            if x != y:
                lines.append(f"{name}: {what} differs "
                             + (f"({x} vs {y})" if what == "exit code" else _first_difference(x, y)))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="main", help="git ref whose outputs are the reference (default main)")
    ap.add_argument("--quick", action="store_true", help="two option sets, no 2,000-message session")
    ap.add_argument("--server", action="store_true", help="the server paths (--server-args) only")
    ap.add_argument("--run-cases", nargs=3, metavar=("TREE", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_cases:
        run_cases(*map(Path, args.run_cases))
        return 0
    with tempfile.TemporaryDirectory(prefix="outputs-identical-") as tmp:
        work = Path(tmp)
        big = None
        if args.server:
            todo = server_cases(work)
        elif not args.quick:
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from run import big_session  # noqa: E402  (the benchmarks' own 2,000-message session)

            big = big_session(work / "big-2000.jsonl")
        if not args.server:
            todo = cases(sessions(big), args.quick, big)
        spec = work / "cases.json"
        spec.write_text(json.dumps(todo))
        ref_tree = work / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(ref_tree), args.ref],
                       check=True)
        try:
            t_ref = _run_tree(ref_tree, spec, work / "ref.json")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref_tree)], check=False)
        t_new = _run_tree(ROOT, spec, work / "new.json")
        ref, new = (json.loads((work / f).read_text()) for f in ("ref.json", "new.json"))
    diffs = compare(ref, new)
    differing = len({d.split(":")[0] for d in diffs})
    failed = sum(1 for r in new.values() if r[0] not in (0, None))
    print(f"| ref | cases | identical | differing | non-zero exits (both) | ref s | new s |")
    print(f"|---|---|---|---|---|---|---|")
    print(f"| {args.ref} | {len(ref)} | {len(ref) - differing} | {differing} | {failed} | {t_ref:.0f} | {t_new:.0f} |")
    for line in diffs[:20]:
        print(line)
    if len(diffs) > 20:
        print(f"… and {len(diffs) - 20} more")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
