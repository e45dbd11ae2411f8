"""The 2,000-message session (benchmarks/run.py's) replayed through a server setup (4 unified
slots, host cache, idle slots cached: llama-server's defaults) against the one-slot replay
and the resume layout: prints a table. Goal (issue 21): ≤ 3× one resume layout.

The session has one thread; a stream with subagent threads adds slot switches and
host-cache loads, each an LCP walk over the slots and saved prompts (timed here on
``traffic.agent_stream`` with 330 main turns)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from run import _big_request, best  # noqa: E402

from replayer.core import session_replay as sr  # noqa: E402
from replayer.core.prompt.layout import compute_layout  # noqa: E402
from replayer.core.replay import ReplayConfig  # noqa: E402


def main() -> None:
    p, s, req, tpl = _big_request()
    cfg = ReplayConfig.seed(template="qwen3-coder")
    st = sr.load_turns(p)
    t_layout = best(lambda: compute_layout(req.messages, req.body.get("tools"), template=tpl), 3)
    c_layout = best(lambda: compute_layout(req.messages, req.body.get("tools"), template=tpl), 3, time.process_time)
    rows = [("session", f"{len(s.messages)} messages, {len(st.turns)} turns")]
    rows.append(("resume layout (estimate)", f"{t_layout * 1000:.1f} ms (CPU {c_layout * 1000:.1f} ms)"))
    for label, args in (("one slot (no --server-args)", None), ("--server-args '' (defaults)", ""),
                        ("--server-args '-np 1 --cache-ram 0'", "-np 1 --cache-ram 0")):
        def replay():
            prep = sr.prepare_session(p, cfg, turns=st)
            prep.server_args = args
            return [sr.simulated_session_run(prep, r) for r in ("A", "B")]
        t = best(replay, 2)
        rows.append((f"session replay A and B, {label}", f"{t * 1000:.1f} ms = {t / t_layout:.2f}× layout"))
    rows += _threads(cfg)
    rows += _subagent_session(cfg, t_layout, c_layout)
    rows.append(("load avg", " ".join(Path("/proc/loadavg").read_text().split()[:3])))
    w = max(len(a) for a, _ in rows)
    for a, b in rows:
        print(f"{a:<{w}}  {b}")


def _threads(cfg) -> list[tuple[str, str]]:
    """The agent-shaped stream with subagent threads: the server simulation alone (turn
    prompts laid out once), one slot against the defaults."""
    import json
    import tempfile

    from replayer.core.server.traffic import agent_stream

    bodies = agent_stream(330, burst=5, words=40)
    log = Path(tempfile.mkdtemp(prefix="slots-bench-")) / "stream.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    prep = sr.prepare_session(log, cfg)
    rows = [("stream with threads", f"{len(bodies)} requests, {prep.layouts['A'].prompts[-1].n_tokens:,} tokens "
                                    "at the end")]
    for label, args in (("one slot", None), ("defaults", "")):
        prep.server_args = args
        t = best(lambda: [sr.simulated_session_run(prep, r) for r in ("A", "B")], 2)
        rows.append((f"  simulation A and B, {label}", f"{t * 1000:.1f} ms"))
    return rows


def _claude_records(n_messages: int, session: str, t0: float, step: float, side: bool, rng) -> list[dict]:
    """A Claude Code 2.1-shaped thread: a prompt every 100 messages, else a Read call and its
    result (synthetic code text, ~60 tokens); one record a ``step`` seconds from ``t0``."""
    import datetime

    from make_fixtures import IDENT, _code, _prose

    out: list[dict] = []
    parent = None

    def add(kind: str, message: dict) -> None:
        nonlocal parent
        ts = datetime.datetime.fromtimestamp(t0 + step * len(out), datetime.timezone.utc)
        uid = f"{session}-{'s' if side else 'm'}-{len(out)}"
        out.append({"type": kind, "uuid": uid, "parentUuid": parent, "sessionId": session, "isSidechain": side,
                    "timestamp": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"), "message": message})
        parent = uid

    n = 0
    while n < n_messages:
        if n % 100 == 0:
            add("user", {"role": "user", "content": _prose(rng, 30)})
            n += 1
        k = len(out)
        add("assistant", {"id": f"msg_{uuid_of(session, side, k)}", "role": "assistant", "model": "m", "content": [
            {"type": "tool_use", "id": f"t{k}", "name": "Read", "input": {"path": f"src/{rng.choice(IDENT)}.py"}}]})
        add("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}",
                                                  "content": _code(rng, rng.randint(3, 9))}]})
        n += 2
    return out


def uuid_of(session: str, side: bool, k: int) -> str:
    return f"{session[:8]}{'s' if side else 'm'}{k}"


def subagent_files(d: Path, n_messages: int, n_agents: int, rng) -> Path:
    """A Claude Code 2.1 session as it writes one with subagents: the main file of ``n_messages``
    and ``n_agents`` per-agent files (``<session>/subagents/agent-*.jsonl``) of 40 messages each,
    spread evenly over the main thread by their timestamps; returns the main file."""
    import json

    sid = "b3nch000-0000-4000-8000-000000000000"
    main = _claude_records(n_messages, sid, 1_790_000_000.0, 1.0, False, rng)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in main))
    (d / sid / "subagents").mkdir(parents=True, exist_ok=True)
    every = n_messages / n_agents
    for a in range(n_agents):
        recs = _claude_records(40, sid, 1_790_000_000.0 + every * a + every / 2 + 0.5, 0.01, True, rng)
        (d / sid / "subagents" / f"agent-a{a:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d / f"{sid}.jsonl"


def _subagent_session(cfg, t_layout: float, c_layout: float) -> list[tuple[str, str]]:
    """The 2,000-message session as Claude Code 2.1 writes it with subagents: the main file and
    ten per-agent files (``<session>/subagents/agent-*.jsonl``) of 40 messages each, their
    requests between the main turns by time; imported, laid out and simulated for A and B."""
    import random
    import tempfile

    main_file = subagent_files(Path(tempfile.mkdtemp(prefix="claude-sub-bench-")), 2000, 10, random.Random(5))
    st = sr.load_turns(main_file)
    threads = len({t.thread for t in st.turns})
    rows = [("2,000-message Claude Code session + 10 subagent files",
             f"{len(st.turns)} requests on {threads} threads")]
    for label, args in (("one slot", None), ("defaults", "")):
        def replay():
            prep = sr.prepare_session(main_file, cfg, turns=st)
            prep.server_args = args
            return [sr.simulated_session_run(prep, r) for r in ("A", "B")]
        t = best(replay, 2)
        c = best(replay, 3, time.process_time)  # CPU: what a loaded machine moves least
        rows.append((f"  session replay A and B, {label}", f"{t * 1000:.1f} ms = {t / t_layout:.2f}× layout "
                                                           f"(CPU {c * 1000:.1f} ms = {c / c_layout:.2f}×)"))
    return rows


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"({time.monotonic() - t0:.0f} s)")
