"""A reproduction a maintainer can run: the replay's requests, what each build did, and a script.

llama.cpp's maintainers ask for a reproduction that runs with the repository's own binaries, not
a report about another tool's runs. ``write_bundle`` writes a folder with:

- ``requests.jsonl`` — every request of the replay, in order, with the endpoint and the body
  exactly as the replay sent it (the script adds ``max_tokens: 1``, ``stream``,
  ``return_progress`` and ``cache_prompt`` as the live engine does);
- ``expected.json`` — per run (A and B): the build, its ``--version`` when it is installed here,
  the server command line the run used or (simulated) assumed, and per request ``n_prompt``,
  ``cache_n``, ``prompt_n``, the batch sizes and the prompt time;
- ``repro.py`` — a stdlib-only script (``replayer/data/repro/repro.py``) that sends the requests
  to a running llama-server, prints the same facts and compares them with a run;
- ``ISSUE.md`` — llama.cpp's bug-report fields filled in from the replay;
- ``logs/<run>.log`` — a live run's relevant ``-lv 4`` lines (its ``LogLine`` events), under a
  heading per request; ``ISSUE.md`` quotes those of the request that re-processed the most.

Everything is redacted by default (``redact.redact``), request bodies included: a request that
redaction changed is counted in the README, since its token counts can then differ slightly.
The folder is written beside its destination and renamed into place, so a failure leaves
nothing half-written and an existing non-empty folder is never touched.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from replayer.core.engine.slot_turns import SessionRun
from replayer.core.errors import ReplayerError
from replayer.core.redact import redact, redact_bytes
from replayer.core.runspec import DEFAULT_SESSION_CTX
from replayer.core.session.turns import thread_of

_QUOTED = 40  # lines of the log ISSUE.md quotes; the rest is in logs/
ENDPOINT = "/v1/chat/completions"


def requests_of(prep) -> tuple[list[dict[str, Any]], int]:
    """Every request of the replay in order, redacted, as the bundle's script sends them; and
    how many of them redaction changed."""
    out, n_changed = [], 0
    for turn in prep.turns.turns:
        raw = orjson.dumps(turn.body)
        masked = redact_bytes(raw)
        n_changed += masked != raw
        out.append({"index": turn.index, "thread": thread_of(turn), "endpoint": ENDPOINT,
                    "body": orjson.loads(masked)})
    return out, n_changed


def run_facts(run: SessionRun) -> list[dict[str, Any]]:
    """Per request what the run reports: the numbers the script compares and the batches."""
    return [{"index": t.turn, "n_prompt": t.n_prompt, "cache_n": t.cache_n, "prompt_n": t.prompt_n,
             "batches": [b.n_tokens for b in t.batches], "prompt_ms": round(t.prompt_ms, 3), "error": t.error}
            for t in run.turns]


def server_command(prep, run: SessionRun) -> list[str]:
    """The llama-server command line of the run, with a plain binary name, the model's file name
    and port 8080: what a maintainer types (the live engine's own ``LiveServer.command``)."""
    from replayer.core.engine.live import LiveOptions, LiveServer

    m = prep.config.model or ""
    model = Path(m).name if m.endswith(".gguf") else "YOUR-MODEL.gguf"  # a preset is not a file to pass
    # a live run's own context; a simulated one's must hold its longest prompt (the simulation has no limit)
    longest = max((t.n_prompt for t in run.turns), default=0)
    n_ctx = int(run.settings.get("ctx_size") or prep.n_ctx
                or max(DEFAULT_SESSION_CTX, -(-(longest + 1024) // 4096) * 4096))
    opts = LiveOptions(binary=Path("llama-server"), model=Path(model), port=8080)
    return LiveServer(opts, prep.config.knobs(), n_ctx).command()


def build_version(spec: str, backend: str = "cpu") -> str:
    """``llama-server --version`` of the run's build when it is installed here, else a note."""
    from replayer.core.builds.manager import probe_version, resolve_binary

    try:
        return probe_version(Path(resolve_binary(spec, backend).binary))[1].strip()
    except ReplayerError as exc:
        return f"(not run here: {exc})"


def log_text(run: SessionRun) -> str:
    """A live run's log lines under a heading per request (start-up first)."""
    out, turn = [], object()
    for e in run.log:
        if e.turn != turn:
            turn = e.turn
            out.append("# server start-up" if turn is None else f"# request {turn}")
        out.append(e.text)
    return "\n".join(out) + "\n"


def quoted_log(runs: dict[str, SessionRun]) -> str:
    """For ISSUE.md: each live run's lines of the request (after the first) that re-processed
    the most — where a maintainer looks first — at most ``_QUOTED`` lines each."""
    parts = []
    for name, run in runs.items():
        later = [t for t in run.turns[1:] if not t.error]
        if not run.log or not later:
            continue
        worst = max(later, key=lambda t: t.prompt_n)
        lines = [e.text for e in run.log if e.turn == worst.turn][:_QUOTED]
        parts += [f"Run {name}, request {worst.turn} ({worst.prompt_n:,} tokens processed, "
                  f"{worst.cache_n:,} reused):", "", "```", *lines, "```", ""]
    return "\n".join(parts)


def check_destination(out: str | Path) -> Path:
    """``out`` as a folder the bundle may be written to: new, or empty."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReplayerError(f"{out} exists and is not an empty folder: the bundle is written only to a new one")
    return out


def write_bundle(out: str | Path, prep, runs: dict[str, SessionRun], *, hardware: str = "") -> Path:
    """Write the bundle to ``out`` (new, or an empty folder); returns its path. A live run's
    server log comes with its run (``SessionRun.log``)."""
    out = check_destination(out)
    reqs, n_redacted = requests_of(prep)
    n_prompt = {t["index"]: t["n_prompt"] for t in run_facts(runs["A"])}
    expected = {"session": redact(str(prep.turns.session.path)), "model": Path(prep.config.model or "").name,
                "redacted_requests": n_redacted, "runs": {}}
    for name, run in runs.items():
        spec = prep.config.a if name == "A" else prep.config.b
        expected["runs"][name] = {
            "label": run.label, "build": run.build, "generation": run.generation, "engine": run.engine,
            "version": redact(build_version(spec)), "command": server_command(prep, run), "failed": run.failed,
            "requests": run_facts(run)}
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".repro-", dir=parent))
    try:
        with open(tmp / "requests.jsonl", "wb") as f:
            for r in reqs:
                f.write(orjson.dumps(dict(r, n_prompt=n_prompt.get(r["index"]))) + b"\n")
        (tmp / "expected.json").write_bytes(redact_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2)))
        script = resources.files("replayer.data").joinpath("repro/repro.py").read_bytes()
        (tmp / "repro.py").write_bytes(script)
        os.chmod(tmp / "repro.py", 0o755)
        logged = [name for name, run in runs.items() if run.log]
        for name in logged:
            (tmp / "logs").mkdir(exist_ok=True)
            (tmp / "logs" / f"{name}.log").write_text(redact(log_text(runs[name])))
        (tmp / "README.md").write_text(redact(_readme(expected, hardware)))
        (tmp / "ISSUE.md").write_text(redact(_issue(expected, prep, hardware, logged, quoted_log(runs))))
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _totals(run: dict[str, Any]) -> tuple[int, int]:
    reqs = run["requests"]
    return sum(r["prompt_n"] for r in reqs), sum(r["cache_n"] for r in reqs)


def _readme(expected: dict[str, Any], hardware: str) -> str:
    lines = ["# A reproduction from replayer", "",
             f"{len(next(iter(expected['runs'].values()))['requests'])} requests of one session, in order "
             "(`requests.jsonl`). Start a llama-server, then send them:", ""]
    for name, run in expected["runs"].items():
        lines += [f"## Run {name}: {run['build']} ({run['engine']})", "", "```", " ".join(run["command"]),
                  f"python3 repro.py --url http://127.0.0.1:8080 --expect {name}", "```", ""]
    if any(r["engine"] != "live" for r in expected["runs"].values()):
        lines += ["A simulated run's numbers are replayer's prediction for that build and setup; running the "
                  "script against the real build is the check.", ""]
    if "YOUR-MODEL.gguf" in " ".join(next(iter(expected["runs"].values()))["command"]):
        lines += [f"The replay simulated the model preset `{expected['model']}`: pass a GGUF of that model.", ""]
    if expected["redacted_requests"]:
        lines += [f"{expected['redacted_requests']} request(s) had secrets or the home folder masked; their "
                  "token counts can differ by a few tokens from the replay's.", ""]
    if hardware:
        lines += [f"Hardware of the replay: {hardware}", ""]
    return "\n".join(lines)


def _issue(expected: dict[str, Any], prep, hardware: str, logged: list[str], quoted: str) -> str:
    runs = expected["runs"]
    a, b = runs.get("A"), runs.get("B")
    rows = []
    for name, run in runs.items():
        processed, reused = _totals(run)
        rows.append(f"- {name}: {run['build']} — {processed:,} tokens processed, {reused:,} reused from the cache, "
                    f"{sum(len(r['batches']) for r in run['requests']):,} batches ({run['engine']})")
    first_bad = "not bisected" if not (a and b) else "not bisected (see `replayer bisect`)"
    return "\n".join([
        "### Name and Version", "", "```", *(f"{n} ({r['build']}): {r['version']}" for n, r in runs.items()), "```", "",
        "### Operating systems", "", f"{platform.system()} {platform.release()}", "",
        "### GGML backends", "", "CPU" if not hardware else hardware, "",
        "### Hardware", "", hardware or platform.machine(), "",
        "### Models", "", expected["model"] or "(not given)", "",
        "### Problem description & steps to reproduce", "",
        f"The same {len(a['requests']) if a else 0} requests, sent in order with `cache_prompt` and `max_tokens: 1`:",
        "", *rows, "", "Steps: start the server with the command line in README.md, then "
        "`python3 repro.py --expect A` (and B on the other build).", "",
        "### First Bad Commit", "", first_bad, "",
        "### Relevant log output", "", _log_section(logged, quoted)])


def _log_section(logged: list[str], quoted: str) -> str:
    if not logged:
        return "(simulated runs: no server log)\n"
    files = ", ".join(f"`logs/{name}.log`" for name in logged)
    return f"The `-lv 4` lines of every request are in {files}.\n\n{quoted}"
