"""A ``--log-prompts-dir`` folder as a session and its server's log as the observed side, offline.

The log lines are the server's format strings filled in (``SLT_INF``/``SLT_TRC``: "slot %12.*s:
id %2d | task %d | ", tools/server/server-common.h; the messages of server-context.cpp named in
``record/server_log.py``); the JSONL shape is common/log.cpp:107-121's. The live test
(tests/test_prompt_log_live.py) checks the same against a real build's folder and log.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from replayer.core.errors import ImportFailed
from replayer.core.record.server_log import read_server_log
from replayer.core.session.turns import load_turns

from conftest import REPO

LISTEN = "0.00.100.000 I srv          main: listening on http://127.0.0.1:8080"


def _task(task: int, slot: int, n_tokens: int, cache_n: int, ms: float, *, traced: bool = True,
          t0: str = "0.01") -> list[str]:
    out = [f"{t0}.000.000 I slot get_availabl: id  {slot} | task -1 | selected slot by LRU, t_last = -1",
           f"{t0}.000.100 I slot launch_slot_: id  {slot} | task {task} | processing task, is_child = 0"]
    if traced:
        out += [f"{t0}.000.200 I slot update_slots: id  {slot} | task {task} | new prompt, n_ctx_slot = 4096, "
                f"n_keep = 0, task.n_tokens = {n_tokens}",
                f"{t0}.000.300 I slot update_slots: id  {slot} | task {task} | cached n_tokens = {cache_n}, "
                f"memory_seq_rm [{cache_n}, end)"]
    out.append(f"{t0}.010.300 I slot print_timing: id  {slot} | task {task} | prompt eval time = {ms:10.2f} ms / "
               f"{n_tokens - cache_n:5d} tokens (    0.20 ms per token,  5000.00 tokens per second)")
    return out


def test_each_completion_task_is_read_with_its_slot_counts_and_batches(tmp_path):
    lines = [LISTEN, *_task(0, 0, 50, 0, 10.0), *_task(2, 1, 80, 49, 5.0, t0="0.02"),
             "0.03.000.000 I slot update_slots: id  1 | task 9 | cached n_tokens = 3, memory_seq_rm [3, end)"]
    (tmp_path / "s.log").write_text("\n".join(lines) + "\n")
    log = read_server_log(tmp_path / "s.log")
    assert log.shape == "text" and log.traced and log.warnings == []
    got = [(r.task, r.slot, r.n_tokens, r.cache_n, r.prompt_n, r.prompt_ms, r.batch_starts) for r in log.requests]
    # task 9 never started in the log: not a request of it
    assert got == [(0, 0, 50, 0, 50, 10.0, [0]), (2, 1, 80, 49, 31, 5.0, [49])]


def test_the_jsonl_log_reads_as_the_text_one(tmp_path):
    text = [LISTEN, *_task(0, 0, 50, 0, 10.0), *_task(1, 0, 60, 49, 2.5, t0="0.02")]
    us = 1_000_000
    entries = [{"type": "log", "time": us + k, "level": "info", "msg": line.split(" I ", 1)[1] + "\n"}
               for k, line in enumerate(text)]
    entries.insert(1, {"type": "fit_memory_breakdown", "data": {"x": 1}})  # LOG_JSON: no task in it
    (tmp_path / "j.log").write_text("".join(json.dumps(e) + "\n" for e in entries))
    (tmp_path / "t.log").write_text("\n".join(text) + "\n")
    j, t = read_server_log(tmp_path / "j.log"), read_server_log(tmp_path / "t.log")
    assert j.shape == "jsonl"
    assert [(r.task, r.cache_n, r.prompt_n, r.prompt_ms) for r in j.requests] == \
        [(r.task, r.cache_n, r.prompt_n, r.prompt_ms) for r in t.requests] == [(0, 0, 50, 10.0), (1, 49, 11, 2.5)]


def test_a_restart_keeps_the_last_run_and_a_log_without_lv4_says_what_it_lacks(tmp_path):
    lines = [LISTEN, *_task(0, 0, 50, 0, 10.0), LISTEN, *_task(0, 0, 70, 0, 12.0, traced=False)]
    (tmp_path / "s.log").write_text("\n".join(lines) + "\n")
    log = read_server_log(tmp_path / "s.log")
    assert [(r.prompt_n, r.cache_n) for r in log.requests] == [(70, None)]
    assert log.starts == 2 and not log.traced
    assert any("started 2 times" in w for w in log.warnings) and any("-lv 4" in w for w in log.warnings)


def test_a_file_without_tasks_is_refused_in_one_line(tmp_path):
    (tmp_path / "x.log").write_text("hello\n")
    with pytest.raises(ImportFailed, match="no completion task"):
        read_server_log(tmp_path / "x.log")
    with pytest.raises(ImportFailed, match="not a file"):
        read_server_log(tmp_path)


@pytest.fixture
def folder(tmp_path):
    from replayer.core.tiny_models import make_tiny

    model = make_tiny("llama", tmp_path / "llama.gguf")
    d = tmp_path / "prompts"
    d.mkdir()
    p1 = ("<|start_header_id|>system<|end_header_id|>\n\nYou help.<|eot_id|><|start_header_id|>user<|end_header_id|>"
          "\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    p2 = p1 + "Hi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nMore<|eot_id|><|start_header_id|>assistant" \
              "<|end_header_id|>\n\n"
    (d / "000000001000.txt").write_text(p1)
    (d / "000000002500.txt").write_text(p2)
    return d, model


def test_the_folder_is_a_session_of_its_prompts_as_logged(folder):
    d, model = folder
    st = load_turns(d)
    assert st.session.format == "prompt-log" and st.exact
    assert [t.prompt for t in st.turns] == [(d / n).read_text() for n in ("000000001000.txt", "000000002500.txt")]
    assert all(t.wire == ("/completion", {"prompt": t.prompt}) for t in st.turns)
    from replayer.core.builds.catalog import parse_build
    from replayer.core.prompt.turn_layouts import turn_layouts
    from replayer.core.session.formats.prompt_log import read_prompt_log

    lay = turn_layouts(st.turns, tokenizer=f"gguf:{model}", build=parse_build(9859))
    assert lay.renders == 0  # no template: the text the server tokenized
    assert [p.n_tokens for p in lay.prompts] == read_prompt_log(d).token_counts(model)


def _replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", "replay", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_the_report_puts_the_logs_numbers_beside_the_runs(folder, tmp_path):
    d, model = folder
    from replayer.core.session.formats.prompt_log import read_prompt_log

    n1, n2 = read_prompt_log(d).token_counts(model)
    shared = n1 - 1  # what one slot reuses of the first prompt: all but its last token
    log = tmp_path / "server.log"
    log.write_text("\n".join([LISTEN, *_task(0, 0, n1, 0, 10.0), *_task(1, 0, n2, shared, 2.0, t0="0.02")]) + "\n")
    r = _replay(str(d), "--mode", "session", "--observed", str(log), "--model", str(model), "--a", "9859",
                "--b", "9859", "--json")
    assert r.returncode == 0, r.stderr
    obs = json.loads(r.stdout)["observed"]
    assert [(q["cache_n"], q["prompt_n"], q["slot"], q["task"]) for q in obs["requests"]] == \
        [(0, n1, 0, 0), (shared, n2 - shared, 0, 1)]
    assert obs["agreement"]["A"]["same_prompt_tokens"] == 2
    md = _replay(str(d), "--mode", "session", "--observed", str(log), "--model", str(model), "--markdown")
    assert md.returncode == 0 and "**Observed vs simulated**" in md.stdout and "as its log says" in md.stdout


def test_the_servers_log_beside_the_folder_is_its_observed_side_without_observed(folder, tmp_path):
    """``replay D --mode session`` with the server's log next to D (``server.log``, or ``D.log``,
    or a log inside D): the same observed side as ``--observed`` gives, and stderr says which file
    it read. A file there that is not a server's log is no observed side; two logs are one error."""
    d, model = folder
    from replayer.core.session.formats.prompt_log import read_prompt_log

    n1, n2 = read_prompt_log(d).token_counts(model)
    lines = "\n".join([LISTEN, *_task(0, 0, n1, 0, 10.0), *_task(1, 0, n2, n1 - 1, 2.0, t0="0.02")]) + "\n"
    args = (str(d), "--mode", "session", "--model", str(model), "--a", "9859", "--b", "9859", "--json")
    (tmp_path / "server.log").write_text("a note of mine\n")  # not a server's log: not read as one
    plain = _replay(*args)
    assert plain.returncode == 0 and "observed" not in json.loads(plain.stdout) and "observed side" not in plain.stderr
    (tmp_path / "server.log").write_text(lines)
    given = _replay(*args, "--observed", str(tmp_path / "server.log"))
    found = _replay(*args)
    assert found.returncode == 0, found.stderr
    assert f"observed side: {tmp_path / 'server.log'}" in found.stderr
    assert json.loads(found.stdout)["observed"] == json.loads(given.stdout)["observed"]
    assert [q["task"] for q in json.loads(found.stdout)["observed"]["requests"]] == [0, 1]
    (d / "llama.log").write_text(lines)  # a second one, inside the folder
    two = _replay(*args)
    assert two.returncode != 0 and "2 server logs" in two.stderr and "--observed" in two.stderr
    assert two.stderr.count("\n") == 1 and "Traceback" not in two.stderr
    chosen = _replay(*args, "--observed", str(d / "llama.log"))  # the user says which: no question
    assert chosen.returncode == 0 and json.loads(chosen.stdout)["observed"]["n_requests"] == 2


def test_bad_uses_are_one_line_and_non_zero(folder, tmp_path):
    d, model = folder
    resume = _replay(str(d), "--model", str(model))
    assert resume.returncode != 0 and "--mode session" in resume.stderr and "Traceback" not in resume.stderr
    (tmp_path / "junk.log").write_text("not a server log\n")
    bad = _replay(str(d), "--mode", "session", "--observed", str(tmp_path / "junk.log"), "--model", str(model))
    assert bad.returncode != 0 and "no completion task" in bad.stderr and "Traceback" not in bad.stderr
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    other = _replay(str(body), "--mode", "session", "--observed", str(tmp_path / "junk.log"))
    assert other.returncode != 0 and "--log-prompts-dir" in other.stderr and "Traceback" not in other.stderr


def test_inspect_counts_the_folders_prompts_and_misses_nothing(folder):
    """Each prompt is a turn, and nothing is missing to supply: the system prompt is in the text."""
    d, _ = folder
    out = subprocess.run([sys.executable, "-m", "replayer.cli", "inspect", str(d), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert (info["format"], info["turns"], info["missing"]) == ("prompt-log", 2, [])
    assert not [w for w in info["warnings"] if "does not store" in w]
