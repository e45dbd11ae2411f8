"""The same options give the same replay through ``replay --json`` and through the app.

Both front ends parse the same command line into a config and hand it to the one
orchestrator; the app's JSON export and the CLI's ``--json`` must then agree, for a matrix
of options and for a live replay on real builds (timings aside: two live runs never
take the same milliseconds).
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from replayer.cli import _config, build_parser, main
from replayer.core.replay import prepare
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.replay import ReplayScreen

from conftest import FIXTURES

SESSION = str(FIXTURES / "pi/small-v3.jsonl")
MATRIX = [
    [],
    ["--a", "9763", "--b", "11434", "-ub", "2048"],
    ["--a", "G1", "--b", "G2a", "--gpu", "rtx4090", "--model", "gpt-oss-20b", "--cms", "64"],
    ["--a", "9940", "--b", "10001", "--model", "llama-8b-q4_0", "--ctx-checkpoints", "2", "-b", "512",
     "-ub", "128", "--template", "chatml"],
    [str(FIXTURES / "claude-code/small.jsonl"), "--backend", "rocm", "--tokenizer", "estimate"],
]


def _cli_json(argv: list[str], capsys) -> dict:
    capsys.readouterr()
    assert main(argv + ["--json"]) in (0, 1)
    return orjson.loads(capsys.readouterr().out)


async def _app_json(argv: list[str], export_dir: Path, timeout: float = 60.0) -> dict:
    """The app's path of ``replay … --app``: the parsed options, prepared by the core, run by the
    replay screen, exported as the app's JSON report."""
    ns = build_parser().parse_args(argv)
    prep = prepare(ns.session, _config(ns))
    app = ReplayerApp(default_speed=0.0, config=prep.config, replay=prep)
    async with app.run_test(size=(120, 40), headless=True) as pilot:
        t = time.monotonic()
        while not (isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None):
            assert time.monotonic() - t < timeout, "the app's replay did not finish"
            await pilot.pause(0.05)
        app.screen.action_export("json")
        await pilot.pause()
    (f,) = export_dir.glob("*.json")
    return orjson.loads(f.read_bytes())


def _argv(opts: list[str]) -> list[str]:
    session = opts[0] if opts and not opts[0].startswith("-") else SESSION
    rest = opts[1:] if opts and not opts[0].startswith("-") else opts
    return ["replay", session, *rest]


@pytest.mark.parametrize("opts", MATRIX, ids=lambda o: " ".join(Path(x).name for x in o) or "defaults")
async def test_cli_and_app_give_the_same_replay(opts, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path))
    argv = _argv(opts)
    cli = _cli_json(argv, capsys)
    app = await _app_json(argv, tmp_path)
    assert cli["runs"] == app["runs"] and cli["comparison"] == app["comparison"]
    assert cli["session"]["format"] == app["session"]["format"]
    assert cli["runs"][0]["batches"] and cli["runs"][0]["engine"] == "simulated"


def _shape(run: dict) -> dict:
    """What a live run decides (not how long it took)."""
    return {k: run[k] for k in ("build", "generation", "engine", "n_tokens", "user_starts", "error")} | {
        "batches": [(b["start"], b["n_tokens"], b["reason"]) for b in run["batches"]],
        "checkpoints": [c["n_tokens"] for c in run["checkpoints"]]}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from replayer.core.builds import manager
    from replayer.core.tiny_models import make_tiny

    for b in (9859, 10001):
        manager.install(b, "cpu")
    return make_tiny("llama", tmp_path_factory.mktemp("tiny") / "llama.gguf")


@pytest.mark.live
async def test_live_replay_is_the_same_through_the_cli_and_the_app(tiny_llama, capsys, monkeypatch, tmp_path):
    """This failed before: ``--model PATH`` was an unknown model preset on the app's path."""
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path))
    argv = ["replay", SESSION, "--engine", "live", "--model", str(tiny_llama), "--a", "9859", "--b", "10001",
            "-b", "64", "-ub", "32"]
    cli = _cli_json(argv, capsys)
    app = await _app_json(argv, tmp_path, timeout=300)
    for c, a in zip(cli["runs"], app["runs"]):
        assert c["error"] is None and c["engine"] == "live", c["error"]
        assert _shape(c) == _shape(a)
    assert [r["build"] for r in cli["runs"]] == ["b9859", "b10001"]
    assert cli["runs"][0]["n_batches"] > cli["runs"][1]["n_batches"]  # the regression breaks at user starts
    # time lost vs ideal batching: the server's own prompt tokens in full -b 64 batches, measured by
    # the run that batched so (b10001: a plain model takes no checkpoints, so no user-start breaks)
    ideal = [r["ideal_batching"] for r in cli["runs"]]
    for run, i in zip(cli["runs"], ideal):
        assert i["ideal_batches"] == -(-run["n_tokens"] // 64) and i["batches"] == run["n_batches"]
        assert i["ideal_ms"] > 0 and i["lost_ms"] == pytest.approx(run["prompt_ms"] - i["ideal_ms"], abs=0.2)
        assert i["text"].startswith(run["label"][0])
    assert [b["start"] for b in cli["runs"][1]["batches"]] == list(range(0, cli["runs"][1]["n_tokens"], 64))
    assert [i["cost"] for i in ideal] == ["measured in run B"] * 2
    assert ideal[0]["ideal_ms"] == ideal[1]["ideal_ms"] == pytest.approx(cli["runs"][1]["prompt_ms"], abs=0.1)
    assert ideal[1]["lost_ms"] == 0 and " lost nothing " in ideal[1]["text"]
    assert ideal[0]["text"].endswith(f"took {ideal[0]['ideal_ms'] / 1000:,.1f} s in run B")
    assert all(" vs ideal batching: " in r["ideal_batching"]["text"] for r in app["runs"])  # the app's export too


@pytest.mark.live
def test_live_screenshot_through_the_cli(tiny_llama, tmp_path):
    """``replay --engine live --model PATH --screenshot`` runs the app headless to the verdict."""
    import subprocess
    import sys

    from conftest import REPO

    shot = tmp_path / "live.svg"
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", SESSION, "--engine", "live", "--a", "9859",
                        "--b", "10001", "--model", str(tiny_llama), "--screenshot", str(shot)],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr
    svg = shot.read_text()
    assert "unknown model" not in r.stderr and svg.startswith("<svg")
    text = svg.replace("&#160;", " ")
    # the verdict screen: both builds, a verdict, the generations and the time lost
    assert "b9859" in text and "b10001" in text and ("faster" in text or "equally fast" in text)
    assert "G1" in text and "ideal" in text and "batching" in text


@pytest.mark.live
def test_a_live_run_says_everything_as_events(tiny_llama):
    """The server's layout and timings arrive as events (no side channel crosses the engine interface)."""
    from replayer.core.engine import events as ev
    from replayer.core.engine.schedule import Slot
    from replayer.core.replay import ReplayConfig, run_events

    prep = prepare(SESSION, ReplayConfig(engine="live", model=str(tiny_llama), a="9859", b="10001",
                                         n_batch=64, n_ubatch=32))
    evs = list(run_events(prep, "A"))
    kinds = [type(e).__name__ for e in evs]
    assert kinds[:2] == ["RunStarted", "LayoutReady"] and kinds[-2:] == ["ServerFacts", "RunFinished"]
    layout, facts = evs[1], evs[-2]
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    assert facts.log_batch_starts == [b.start for b in batches] and facts.timings.get("prompt_n")
    assert layout.n_tokens == evs[0].n_tokens and layout.user_starts
    # the simulator, on the server's own layout, predicts the live batches exactly
    from replayer.core.runspec import PromptSpans

    spans = PromptSpans.of(layout.n_tokens, [u for u in layout.user_starts if 0 < u < layout.n_tokens])
    import dataclasses

    knobs = dataclasses.replace(prep.config.knobs(), memory=evs[0].settings["memory"])  # what the server reported
    sim = Slot(prep.config.builds()[0], knobs).run(spans)
    assert [(b.start, b.n_tokens) for b in sim.batches] == [(b.start, b.n_tokens) for b in batches]
