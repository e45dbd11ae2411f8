"""``inspect`` shows a session's threads and the requests on each: for a request log, its
``thread`` fields as they are (a line without one is on the main thread)."""

from __future__ import annotations

import json

from replayer.cli import main
from replayer.core.server.traffic import agent_stream


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_request_logs_threads_are_counted_in_order(capsys, tmp_path):
    bodies = agent_stream(9, burst=2, words=8)
    bodies[3] = {k: v for k, v in bodies[3].items() if k != "thread"}  # no field: the main thread
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    want: dict[str, int] = {}
    for b in bodies:
        want[b.get("thread", "main")] = want.get(b.get("thread", "main"), 0) + 1
    assert len(want) == 4
    rc, out, err = _run(capsys, ["inspect", str(log), "--json"])
    assert rc == 0, err
    info = json.loads(out)
    assert info["threads"] == want and list(info["threads"]) == list(want)
    rc, out, _ = _run(capsys, ["inspect", str(log)])
    line = next(x for x in out.splitlines() if x.strip().startswith("threads"))
    assert " ".join(line.split()) == "threads 4: " + ", ".join(f"{k} {v}" for k, v in want.items())


def test_a_session_without_threads_has_its_turns_on_the_main_one(capsys):
    from pathlib import Path

    f = Path(__file__).parent.parent / "fixtures" / "claude-code" / "small.jsonl"
    rc, out, err = _run(capsys, ["inspect", str(f), "--json"])
    assert rc == 0, err
    info = json.loads(out)
    assert info["threads"] == {"main": info["turns"]} and info["turns"] > 1
