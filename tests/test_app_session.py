"""The session mode in the app: chosen by keyboard on the setup screen, the turn strip with
its misses, restart and cancel, the verdict (the core's ``session_replay.report``), and
``replay --mode session --app/--screenshot``. A session whose system prompt gains a date from
turn 20 on (``test_session_mode.write_log``) gives a miss with a known cause."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Select, Static

from replayer.core import session_replay as sr
from replayer.core.replay import ReplayConfig, demo_session_path
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.session import SessionScreen, SessionSpec
from replayer.ui.screens.setup import SetupScreen
from replayer.core.words import counted
from replayer.ui.widgets.turn_strip import TurnStrip

from conftest import REPO
from helpers import wait_for
from test_session_mode import _turns, write_log

HYBRID = "qwen3.6-35b-a3b-q8_0"  # recurrent memory: the changed system prompt forces full re-processing
CHANGE_AT = 20


@pytest.fixture(scope="module")
def changed_log(tmp_path_factory) -> Path:
    turns, _, _ = _turns(11)  # 23 turns
    return write_log(tmp_path_factory.mktemp("session") / "log.jsonl", turns, change_from=CHANGE_AT)


def core_report(path, cfg: ReplayConfig, freeze: bool = False) -> tuple[dict, tuple]:
    """What ``replay --mode session --json`` says for the same config."""
    prep = sr.prepare_session(path, cfg, freeze_system=freeze, n_ctx=cfg.ctx_size)
    runs = tuple(sr.session_run(prep, r, list(sr.simulated_session_events(prep, r))) for r in ("A", "B"))
    return sr.report(prep, *runs), runs


def session_app(path, cfg: ReplayConfig, speed: float = 0.0, freeze: bool = False) -> ReplayerApp:
    return ReplayerApp(default_speed=speed, config=cfg, replay=SessionSpec(Path(path), cfg, freeze_system=freeze),
                       deterministic=True)


async def tab_to(pilot, app, selector: str, limit: int = 30):
    """Tab until ``selector`` has focus: reachable by keyboard alone, or the test fails."""
    target = app.screen.query_one(selector)
    for _ in range(limit):
        if app.focused is target:
            return target
        await pilot.press("tab")
    raise AssertionError(f"{selector} is not reachable with Tab")


def strip_of(screen, run: str) -> TurnStrip:
    return screen.pane(run).query_one(TurnStrip)


def cell_at(strip: TurnStrip, turn: int) -> tuple[str, str]:
    return strip.cells(strip.size.width)[strip.column_of(turn)]


async def test_keyboard_chooses_session_mode_and_reaches_the_verdict(changed_log):
    app = ReplayerApp(session=changed_log, default_speed=0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        setup = app.screen
        assert not setup.query_one("#what-if").display, "the what-if belongs to the session mode only"
        await pilot.press("tab")
        assert app.focused is setup.query_one("#build-a", Select), "first Tab still lands on build A"
        mode = await tab_to(pilot, app, "#mode")
        await pilot.press("enter")
        await pilot.pause()
        assert mode.expanded
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, SetupScreen), "Enter inside the list chooses, it does not start"
        assert mode.value == "session"
        assert setup.query_one("#what-if").display
        await tab_to(pilot, app, "#what-if")  # the switch is a Tab stop once shown
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen))
        screen = app.screen
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause()
        doc, _ = core_report(changed_log, ReplayConfig())
        assert screen.doc == doc
        verdict = str(screen.query_one("#verdict", Static).render())
        assert verdict == doc["verdict"] and verdict.startswith("over 23 turns")
        report = str(screen.query_one("#session-report", Static).render())
        assert f"turn {CHANGE_AT}: client_changed" in report and "Today is 2026-12-01" in report
        assert screen.query_one("#verdict").region.height > 0
        for run in ("A", "B"):
            assert cell_at(strip_of(screen, run), CHANGE_AT) == ("C", "client_changed")
        # escape goes back to the setup, still in session mode
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert app.screen.query_one("#mode", Select).value == "session"


async def test_turn_strip_marks_the_changed_system_prompt_and_the_what_if_removes_it(changed_log):
    cfg = ReplayConfig(model=HYBRID)
    doc, runs = core_report(changed_log, cfg)
    app = session_app(changed_log, cfg)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: isinstance(screen, SessionScreen) and screen.comparison is not None)
        await pilot.pause()
        for run, core in zip(("A", "B"), runs):
            strip = strip_of(screen, run)
            cells = strip.cells(strip.size.width)
            missed = {k for (ch, kind), (k, _) in zip(cells, strip.cell_ranges(strip.size.width)) if ch == "C"}
            assert missed == {t.turn for t in core.turns if t.cause} == {CHANGE_AT}
            assert all(kind in ("turn", "client_changed") for _, kind in cells), "every turn finished"
            assert cell_at(strip, 0)[0] == "█", "the first turn is all re-processed"
            assert "C client changed text" in str(strip.render()).splitlines()[2]
            pane = screen.pane(run)
            stats = str(pane.query_one("#stats", Static).render())
            lost = doc["runs"][0 if run == "A" else 1]["lost_by_cause"]["client_changed"]
            assert f"C 1× {int(lost['tokens']):,} tok" in stats
            assert f"processed {core.prompt_n:,} tok" in stats
            assert core.turns[CHANGE_AT].full_reprocess  # the hybrid model: no checkpoint below the change
        report = str(screen.query_one("#session-report", Static).render())
        assert "forcing full prompt re-processing" in report

    frozen = session_app(changed_log, cfg, freeze=True)
    async with frozen.run_test(size=(140, 45)) as pilot:
        screen = frozen.screen
        await wait_for(pilot, lambda: isinstance(screen, SessionScreen) and screen.comparison is not None)
        assert "what-if: freeze the system prompt" in screen.sub_title
        for run in ("A", "B"):
            strip = strip_of(screen, run)
            assert not [ch for ch, kind in strip.cells(strip.size.width) if kind == "client_changed"]
        assert screen.doc == core_report(changed_log, cfg, freeze=True)[0]


async def test_restart_mid_run_shows_only_the_new_runs():
    cfg = ReplayConfig()
    app = session_app(demo_session_path(), cfg, speed=1.0)  # 309 turns at ×1: minutes of modelled time
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.pane("A").turns_done >= 2)
        await pilot.press("r", "3")
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause(0.3)  # anything a cancelled worker still sends would arrive now
        doc, runs = core_report(demo_session_path(), cfg)
        assert screen.doc == doc and "cancel" not in doc["verdict"]
        for run, core in zip(("A", "B"), runs):
            pane = screen.pane(run)
            assert pane.turns_done == len(core.turns) == 309
            assert pane.summary.n_batches == core.n_batches  # no batch of the cancelled runs
            assert [t.turn for t in pane.facts.turns] == list(range(309))


async def test_cancel_marks_the_run_partial_and_the_verdict_says_so(changed_log):
    app = session_app(demo_session_path(), ReplayConfig(), speed=1.0)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.pane("A").turns_done >= 1)
        await pilot.press("a", "3")
        await wait_for(pilot, lambda: screen.comparison is not None)
        a = screen.pane("A")
        assert "PARTIAL" in str(a.border_title) and "cancelled" in str(a.border_title)
        assert screen.doc["verdict"].startswith("a run failed") and screen.doc["runs"][0]["error"]
        assert not [t for t in a.facts.turns if t.cause], "the turn cut short is no miss"
        assert screen.pane("B").turns_done == 309


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def test_cli_screenshot_of_a_session_replay_and_bad_input(changed_log, tmp_path):
    shot = tmp_path / "session.svg"
    out = cli("replay", str(changed_log), "--mode", "session", "--screenshot", str(shot))
    assert out.returncode == 0, out.stderr
    svg = shot.read_text(encoding="utf-8")
    assert "23&#160;turns" in svg and "client&#160;changed" in svg
    bad = cli("replay", str(tmp_path / "missing.jsonl"), "--mode", "session", "--app")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    both = cli("replay", str(changed_log), "--mode", "session", "--screenshot", str(shot), "--json")
    assert both.returncode != 0 and "--screenshot" in both.stderr


# -- snapshots (layout regressions; behaviour is asserted above) --------------------------

@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_session_screen_snapshot(snap_compare, changed_log, size):
    async def run_before(pilot):
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen.comparison is not None)
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(session_app(changed_log, ReplayConfig(model=HYBRID)), terminal_size=size,
                        run_before=run_before)


async def test_the_strip_takes_focus_and_n_enter_show_a_turn(changed_log):
    """Keys only: the strip has focus, ``n`` jumps to the miss, ←/→ move by turn, Enter shows
    the turn; the pane's stats line then holds that turn's facts (the core's TurnRecord)."""
    _, runs = core_report(changed_log, ReplayConfig(model=HYBRID))
    app = session_app(changed_log, ReplayConfig(model=HYBRID))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen.comparison is not None)
        screen = app.screen
        await pilot.pause()
        assert app.focused is screen.query_one("#summary"), "focus moves to the verdict when the runs end"
        shown = {k for k, ab in app.active_bindings.items() if ab.binding.show}
        assert "r" in shown and "e" in shown and "space" not in shown and "a" not in shown, shown
        strip = await tab_to(pilot, app, "#pane-A #strip")
        shown = {k for k, ab in app.active_bindings.items() if ab.binding.show}
        assert {"n", "enter", "right"} <= shown, "the footer offers the strip's keys while it has focus"
        stats = screen.pane("A").query_one("#stats", Static)
        await pilot.press("n")
        await pilot.pause()
        assert strip.selected == CHANGE_AT
        text = str(stats.render())
        t = runs[0].turns[CHANGE_AT]
        assert text.startswith(f"▲ {CHANGE_AT}: reused {t.cache_n:,} · new {t.prompt_n:,} · ")
        # the miss first on its line (a narrow pane cuts the end), then the counts, then its detail
        assert f"\nmiss: client_changed, {t.cause['lost_tokens']:,} tokens · {counted(len(t.batches), 'batch')} · " \
               f"{counted(len(t.created), 'checkpoint')}" in text
        assert text.endswith(" · lost" + sr.miss_line(t).split(" re-processed", 1)[1]) and "Today is" in text
        assert f"▲ turn {CHANGE_AT}" in str(strip.render())
        await pilot.press("n")  # the only miss: n wraps round to it
        assert strip.selected == CHANGE_AT
        await pilot.press("right", "right")
        await pilot.pause()
        assert strip.selected == CHANGE_AT + 2
        assert str(stats.render()).startswith(f"▲ {CHANGE_AT + 2}: ") and "no miss" in str(stats.render())
        await pilot.press("left", "enter")
        await pilot.pause()
        assert strip.selected == CHANGE_AT + 1 and str(stats.render()).startswith(f"▲ {CHANGE_AT + 1}: ")
        await pilot.press("tab")  # Enter at 80×24 gave the verdict's rows to the batch list: it is next
        assert app.focused is screen.pane("A").query_one("#batches") and not screen.query_one("#summary").display
        await pilot.press("tab")
        assert app.focused is strip_of(screen, "B"), "Tab reaches B's strip"


@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_session_strip_snapshot_with_a_turn_selected(snap_compare, changed_log, size):
    async def run_before(pilot):
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen.comparison is not None)
        await pilot.pause()
        await tab_to(pilot, app, "#pane-A #strip")
        await pilot.press("n")
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(session_app(changed_log, ReplayConfig(model=HYBRID)), terminal_size=size,
                        run_before=run_before)


@pytest.mark.live
async def test_live_session_in_the_app_marks_the_real_servers_miss(changed_log, tmp_path):
    """Real b9859 and b10001 with a tiny hybrid model: the strip's miss at turn 20 is the servers'
    own report (``cache_n``, "forcing full prompt re-processing"), explained by the core."""
    from replayer.core.builds import manager
    from replayer.core.engine.live import live_processes
    from replayer.core.tiny_models import make_tiny

    for b in (9859, 10001):
        manager.install(b, "cpu")
    model = make_tiny("lfm2", tmp_path / "lfm2.gguf")
    cfg = ReplayConfig(a="9859", b="10001", engine="live", backend="cpu", model=str(model))
    app = session_app(changed_log, cfg)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.comparison is not None, timeout=600)
        await pilot.pause()
        for run in ("A", "B"):
            facts = screen.pane(run).facts
            assert facts.engine == "live" and len(facts.turns) == 23 and not facts.failed
            missed = [t for t in facts.turns if t.cause]
            assert [t.turn for t in missed] == [CHANGE_AT] and missed[0].full_reprocess
            assert cell_at(strip_of(screen, run), CHANGE_AT) == ("C", "client_changed")
    assert live_processes() == []


async def test_a_session_that_cannot_be_replayed_is_a_message_not_a_crash(tmp_path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text("{not json\n")
    app = session_app(bad, ReplayConfig())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.prepare_error is not None)
        await pilot.pause()
        shown = str(screen.query_one("#verdict", Static).render())
        assert shown == screen.prepare_error and "broken.jsonl" in shown
        assert screen.query_one("#verdict").region.height > 0
        await pilot.press("r")  # nothing to restart: no crash, still the message
        await pilot.press("escape")  # no session to set up: it says so and stays
        await pilot.pause()
        assert app.screen is screen
    assert bad.read_text() == "{not json\n"


async def test_the_apps_session_json_export_is_the_clis_redacted(changed_log, tmp_path, monkeypatch, capsys):
    """A session under the home folder: the app's JSON export masks the home path as ``--json``
    does (both go through core/export.py), and is the same document byte for byte."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    path = home / "work" / "log.jsonl"
    path.write_bytes(changed_log.read_bytes())
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path / "exports"))
    from replayer.cli import main

    assert main(["replay", str(path), "--mode", "session", "--json"]) == 0
    cli_bytes = capsys.readouterr().out.encode()
    app = session_app(path, ReplayConfig())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.screen.comparison is not None)
        app.screen.action_export("json")
        app.screen.action_export("md")
        await pilot.pause()
    (exported,) = (tmp_path / "exports").glob("*.json")
    (md,) = (tmp_path / "exports").glob("*.md")
    for data in (exported.read_bytes(), cli_bytes):
        assert str(home).encode() not in data and b"~/work/log.jsonl" in data
    assert str(home).encode() not in md.read_bytes()
    assert exported.read_bytes() + b"\n" == cli_bytes


async def test_x_writes_the_reproduction_bundle_of_the_replay_on_screen(changed_log, tmp_path, monkeypatch):
    """After the verdict, `x` writes the same bundle as ``replay --mode session --repro``: every
    request, and per run the numbers the screen's runs reported."""
    import orjson

    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path / "exports"))
    app = session_app(changed_log, ReplayConfig())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.screen.comparison is not None)
        await pilot.press("x")
        await pilot.pause()
        runs = app.screen.runs
    (bundle,) = (tmp_path / "exports").glob("*-repro")
    assert (bundle / "repro.py").is_file() and (bundle / "ISSUE.md").is_file()
    exp = orjson.loads((bundle / "expected.json").read_bytes())["runs"]
    for name, run in zip("AB", runs):
        assert [(r["cache_n"], r["prompt_n"]) for r in exp[name]["requests"]] == \
            [(t.cache_n, t.prompt_n) for t in run.turns]
    assert len((bundle / "requests.jsonl").read_bytes().splitlines()) == len(runs[0].turns) == 23


async def choose_mode(pilot, app, steps: str) -> Select:
    """Tab to the mode list, open it, move ``steps`` and choose: by keyboard only."""
    mode = await tab_to(pilot, app, "#mode")
    await pilot.press("enter", steps, "enter")
    await pilot.pause()
    return mode


async def test_the_setup_remembers_the_mode_in_the_saved_settings(changed_log):
    from replayer.core import settings

    app = ReplayerApp(session=changed_log, default_speed=0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert app.screen.query_one("#mode", Select).value == "resume", "a first run starts in resume mode"
        assert (await choose_mode(pilot, app, "down")).value == "session"
    assert settings.load_settings()[0].mode == "session"
    again = ReplayerApp(session=changed_log, default_speed=0.0)  # a later run of the app
    async with again.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(again.screen, SetupScreen))
        setup = again.screen
        assert setup.query_one("#mode", Select).value == "session"
        assert setup.query_one("#what-if").display, "the session mode's what-if is shown with it"
        assert (await choose_mode(pilot, again, "up")).value == "resume"
    assert settings.load_settings()[0].mode == "resume"


def test_the_turn_detail_counts_read_as_words():
    assert [counted(1, "checkpoint"), counted(2, "checkpoint"), counted(1, "batch"), counted(3, "batch"),
            counted(0, "batch"), counted(1200, "checkpoint"), counted(1, "turn"), counted(2, "turn")] == \
        ["1 checkpoint", "2 checkpoints", "1 batch", "3 batches", "0 batches", "1,200 checkpoints", "1 turn", "2 turns"]


async def test_a_prompt_folder_opened_in_the_app_has_the_servers_log_beside_it_as_observed(tmp_path):
    """``replayer FOLDER`` (a ``--log-prompts-dir`` folder with the server's log next to it): the
    app finds the log as ``replay FOLDER --mode session`` does, says so, and the session replay's
    report has the observed side; a session opened after it has none."""
    from test_prompt_log import LISTEN, _task
    d = tmp_path / "prompts"
    d.mkdir()
    p1 = "<|start_header_id|>user<|end_header_id|>\n\nHello there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    (d / "000000001000.txt").write_text(p1)
    (d / "000000002500.txt").write_text(p1 + "Hi!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nMore<|eot_id|>")
    n1, n2 = 40, 60  # the server's counts: any, the report shows them beside the simulated ones
    log = tmp_path / "server.log"
    log.write_text("\n".join([LISTEN, *_task(0, 0, n1, 0, 10.0), *_task(1, 0, n2, n1 - 1, 2.0, t0="0.02")]) + "\n")
    app = ReplayerApp(session=d, default_speed=0.0, deterministic=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        setup = app.screen
        assert setup.config.observed == str(log)
        assert any(f"observed side: {log}" in n.message for n in app._notifications)
        mode = setup.query_one("#mode", Select)
        assert mode.value == "session", "a prompt folder has no resume: its setup opens on the session mode"
        mode.value = "resume"
        await pilot.pause()
        await pilot.press("ctrl+r")  # the CLI's one line, on the setup
        await wait_for(pilot, lambda: "not a conversation to resume" in str(setup.query_one("#setup-error").render()))
        assert app.screen is setup
        mode.value = "session"
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen))
        screen = app.screen
        await wait_for(pilot, lambda: screen.comparison is not None)
        assert screen.doc["observed"]["n_requests"] == 2
        assert [q["task"] for q in screen.doc["observed"]["requests"]] == [0, 1]
        assert "observed (the server, as its log says)" in str(screen.query_one("#session-report", Static).render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        app.open_session(demo_session_path())
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen) and app.screen is not setup)
        assert app.screen.config.observed is None
        await pilot.pause()
