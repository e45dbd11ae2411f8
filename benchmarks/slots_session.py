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
    rows = [("session", f"{len(s.messages)} messages, {len(st.turns)} turns")]
    rows.append(("resume layout (estimate)", f"{t_layout * 1000:.1f} ms"))
    for label, args in (("one slot (no --server-args)", None), ("--server-args '' (defaults)", ""),
                        ("--server-args '-np 1 --cache-ram 0'", "-np 1 --cache-ram 0")):
        def replay():
            prep = sr.prepare_session(p, cfg, turns=st)
            prep.server_args = args
            return [sr.simulated_session_run(prep, r) for r in ("A", "B")]
        t = best(replay, 2)
        rows.append((f"session replay A and B, {label}", f"{t * 1000:.1f} ms = {t / t_layout:.2f}× layout"))
    rows += _threads(cfg)
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


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"({time.monotonic() - t0:.0f} s)")
