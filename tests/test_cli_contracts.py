"""The CLI's JSON outputs, as documented in the issues, on real computations."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from conftest import FIXTURES, REPO


def cli(*args):
    r = subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    return r


def test_schedule_json_toy_vector():
    r = cli("schedule", "--tokens", "10000", "--user-starts", "0,900,1500,4000,4100,7000,9800", "--build", "b9859",
            "--memory", "recurrent", "--json")
    out = orjson.loads(r.stdout)
    assert out["n_tokens"] == 10000 and out["generation"] == "G1"
    assert [(b["start"], b["n_tokens"]) for b in out["batches"]][:3] == [(0, 900), (900, 600), (1500, 2048)]
    assert [b["reason"] for b in out["batches"]][:3] == ["user_start", "user_start", "n_batch"]
    assert [c["n_tokens"] for c in out["checkpoints"]] == [900, 9484, 9800]


@pytest.mark.parametrize("args,needle", [
    (["--user-starts", "-5"], "negative"),
    (["--user-starts", "9,3"], "strictly increasing"),
    (["--user-starts", "20000"], "not inside"),
    (["-ub", "4096"], "larger than -b"),
    (["--build", "banana"], "unknown build"),
])
def test_schedule_bad_input(args, needle):
    base = {"--tokens": "10000", "--build": "9859", "--user-starts": "0,900"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    r = cli("schedule", *[x for kv in base.items() for x in kv])
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_unknown_build_number_is_mapped_with_a_note():
    r = cli("schedule", "--tokens", "100", "--build", "20000", "--json")
    out = orjson.loads(r.stdout)
    assert out["generation"] == "G3" and "newer than the last examined" in out["note"]


def test_replay_json_and_markdown():
    r = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--a", "9859", "--b", "10001", "--json")
    doc = orjson.loads(r.stdout)
    a, b = doc["runs"]
    assert a["build"] == "b9859" and b["generation"] == "G2b" and a["engine"] == "simulated"
    assert {"label", "n_tokens", "prompt_ms", "tokens_per_s", "batches", "checkpoints"} <= set(a)
    assert doc["comparison"]["speedup"] == pytest.approx(b["tokens_per_s"] / a["tokens_per_s"], rel=1e-3)
    md = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--markdown").stdout
    assert md.startswith("## Prefill replay: b9859 vs b10001") and "| decode calls (batches) |" in md


def test_replay_jsonl_streams_events():
    r = cli("replay", str(FIXTURES / "claude-code/small.jsonl"), "--jsonl")
    evs = [orjson.loads(x) for x in r.stdout.splitlines()]
    assert evs[0]["type"] == "run_started" and evs[-1]["type"] == "run_finished"
    assert {e["run"] for e in evs} == {"A", "B"}


def test_presets_json_has_required_ids():
    doc = orjson.loads(cli("presets", "--json").stdout)
    gpus = {g["id"] for g in doc["gpus"]}
    models = {m["id"] for m in doc["models"]}
    assert {"rx9070xt", "rtx4090", "rtx3090", "m2-ultra", "cpu-generic"} <= gpus
    assert {"qwen3.6-35b-a3b-q8_0", "llama-8b-q4_0", "gpt-oss-20b"} <= models
    assert {b["id"] for b in doc["backends"]} == {"cuda", "vulkan", "rocm", "metal", "sycl", "cpu"}


def test_unknown_gpu_did_you_mean():
    r = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--gpu", "rtx5099")
    assert r.returncode == 2 and "did you mean rtx5090" in r.stderr


def test_core_never_imports_textual():
    code = ("import sys, replayer.core.replay, replayer.core.engine.simulate, replayer.core.compare, "
            "replayer.core.export, replayer.cli; assert 'textual' not in sys.modules, 'textual imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr


def test_replay_screenshot_runs_the_app_headless_to_the_verdict(tmp_path):
    svg = tmp_path / "out" / "replay.svg"
    r = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--a", "9859", "--b", "10001", "--speed", "0",
             "--screenshot", str(svg))
    assert r.returncode == 0, r.stderr
    text = svg.read_text()
    assert text.lstrip().startswith('<svg xml:space="preserve"')
    expected = orjson.loads(cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--a", "9859", "--b", "10001",
                                 "--json").stdout)
    a, b = expected["runs"]
    # the verdict and both runs' batch counts are in the picture (SVG text uses &#160; for spaces)
    flat = text.replace("&#160;", " ")
    assert f"{a['n_batches']} batches" in flat and f"{b['n_batches']} batches" in flat
    assert ("faster" in flat) or ("equally fast" in flat)


def test_replay_screenshot_bad_combinations_and_paths_fail_clearly(tmp_path):
    session = str(FIXTURES / "pi/small-v3.jsonl")
    r = cli("replay", session, "--screenshot", str(tmp_path / "x.svg"), "--json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--screenshot" in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = cli("replay", session, "--speed", "0", "--screenshot", str(blocker / "x.svg"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "cannot write" in r.stderr


@pytest.mark.parametrize("flags,where", [
    (["--engine", "live", "--calibrate", "--app"], "--app"),
    (["--calibrate", "--holdout", "x.jsonl", "--screenshot", "x.svg"], "--screenshot"),
    (["--mode", "session", "--repeat", "3"], "--mode session"),
])
def test_calibration_flags_where_nothing_calibrates_are_refused(flags, where, tmp_path):
    """The app and the session mode do not calibrate: the flags are refused (exit 2, one line),
    not dropped, and nothing is written."""
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(FIXTURES / "pi/small-v3.jsonl"), *flags],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"not with {where}" in r.stderr and "--calibration ID" in r.stderr
    assert not list(tmp_path.iterdir())
