"""The builds screen's source row: a llama.cpp folder, a git URL and ref, or a release with a
patch — what a fix is demoed with — typed by keyboard, run by the same manager call as
``builds install --source/--git/--patch``.

Bad input is one line and leaves the cache as it was. The install itself is fault-injected as in
``test_build_cancel``: a tree with llama.cpp's markers and a compile step that only writes its
log and calls the progress callback until the user cancels (nothing is ever compiled here; the
real source builds are ``test_source_builds_live``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from replayer.core.builds import manager, toolchain
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.builds import BuildsScreen

from helpers import wait_for


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()} if root.exists() else {}


def _fake_llama(where: Path) -> Path:
    for rel in ("CMakeLists.txt", "include/llama.h", "tools/server/server-context.cpp"):
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text("// a tree with llama.cpp's markers\n")
    return where


@pytest.fixture
def compiles(monkeypatch):
    """A compile that writes its log and reports progress until the callback cancels."""
    monkeypatch.setattr(toolchain, "require", lambda *a, **k: None)
    calls = []

    def compile_until_cancelled(src, work, env, args, log, progress, jobs, build):
        for i in range(1, 100_000):
            with log.open("a") as f:
                f.write(f"[{i % 100:3d}%] Building CXX object obj{i}.o\n")
            calls.append(i)
            progress("compile", min(20, i) / 1000)
            time.sleep(0.002)  # a compiler's pace: the test presses keys meanwhile
        raise AssertionError("the callback never cancelled")

    monkeypatch.setattr(manager, "_compile", compile_until_cancelled)
    return calls


async def _type(pilot, field: str, text: str) -> None:
    pilot.app.screen.query_one(f"#{field}", Input).focus()
    await pilot.pause()
    await pilot.press(*text) if text else None


async def _source_install(app, pilot, **fields: str) -> Static:
    await app.push_screen(BuildsScreen())
    for field, text in fields.items():
        await _type(pilot, field, text)
    await pilot.press("enter")
    await pilot.pause()
    return app.screen.query_one("#stage", Static)


@pytest.mark.parametrize("fields, says", [
    ({"source-where": "{tmp}/not-llama"}, "not a llama.cpp"),
    ({"source-where": "https://example.invalid/llama.cpp.git"}, "needs a ref"),
    ({"source-patch": "{tmp}/FIX.diff"}, "give exactly one build number"),
    ({"install-number": "9934", "source-patch": "{tmp}/missing.diff"}, "no such patch file"),
    ({"source-ref": "master"}, "needs a llama.cpp folder, a git URL and ref"),
], ids=["not-llama.cpp", "url-without-ref", "patch-without-build", "missing-patch", "nothing-to-build"])
async def test_bad_source_input_is_one_line_and_leaves_the_cache(tmp_path, fields, says):
    (tmp_path / "not-llama").mkdir()
    (tmp_path / "not-llama" / "README").write_text("hello")
    (tmp_path / "FIX.diff").write_text("--- a/x\n+++ b/x\n")
    before = _tree(manager.paths.builds_dir())
    app = ReplayerApp()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        await _source_install(app, pilot, **{k: v.format(tmp=tmp_path) for k, v in fields.items()})
        # refused at once, or (a file the manager checks) by the install's own first step
        await wait_for(pilot, lambda: app.screen.installing is None
                       and any(n.severity == "error" for n in app._notifications))
        errors = [n.message for n in app._notifications if n.severity == "error"]
        assert len(errors) == 1 and says in errors[0] and "\n" not in errors[0], errors
        assert app.screen.installing is None
    assert _tree(manager.paths.builds_dir()) == before


async def test_a_source_folder_installs_from_the_screen_shows_its_log_and_cancels(tmp_path, compiles):
    tree = _fake_llama(tmp_path / "my llama.cpp")
    root = manager.paths.builds_dir()
    before = {k for k in _tree(root) if not k.startswith("locks/")}
    app = ReplayerApp()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        stage = await _source_install(app, pilot, **{"source-where": str(tree)})
        screen = app.screen
        await wait_for(pilot, lambda: len(compiles) > 5)
        assert f"{tree} cpu: compile" in str(stage.render())
        screen.query_one("#catalog").focus()
        await pilot.press("l")  # the source install's own compile log
        await wait_for(pilot, lambda: screen.query_one("#build-log").line_count > 0)
        assert "Building CXX object" in screen.query_one("#build-log").lines[0]
        await pilot.press("c")
        await wait_for(pilot, lambda: screen.installing is None)
        assert str(stage.render()) == f"{tree} cpu: cancelled (nothing kept)"
        assert not screen.query_one("#install-source").disabled
    assert {k for k in _tree(root) if not k.startswith("locks/")} == before
    assert tree.joinpath("CMakeLists.txt").read_text() == "// a tree with llama.cpp's markers\n"  # never touched


def _record(name: str, build: int, source: str, **kw) -> None:
    from replayer.core.builds.records import BuildRecord, write_record

    entry = manager.paths.builds_dir() / name
    entry.mkdir(parents=True)
    (entry / "llama-server").write_bytes(b"")
    write_record(entry, BuildRecord(build=build, backend="cpu", binary=str(entry / "llama-server"), source=source,
                                    created=0.0, key=name, entry=name, **kw))


async def test_source_builds_are_chosen_by_label_and_never_pass_for_releases():
    """A patched b9934 and a commit (its number a commit count): the catalog's and the setup's
    releases are the sdist builds only; the setup offers each source build by its label."""
    from replayer.ui.screens.setup import build_options

    _record("b9934-cpu-x", 9934, "sdist")
    _record("src-a-cpu", 9934, "source", label="b9934+FIX", generation="G2a", identity="a" * 64)
    _record("src-b-cpu", 2, "source", label="1a2b3c4d5", identity="b" * 64)
    assert manager.installed_backends() == {9934: ["cpu"]}
    opts = {v: label for label, v in build_options()}
    assert opts["9934"].endswith("✓ cpu") and "2" not in opts
    assert opts["b9934+FIX"] == "b9934+FIX — from source, G2a  ✓ cpu"
    assert opts["1a2b3c4d5"] == "1a2b3c4d5 — from source, live only  ✓ cpu"
    app = ReplayerApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await app.push_screen(BuildsScreen())
        screen = app.screen
        rows = [screen.query_one("#catalog").get_row(g) for g in ("G0", "G1")]
        assert rows[0][3] == "—" and rows[1][3] == "b9934 ✓ cpu"
        listed = str(screen.query_one("#source-builds", Static).render())
        assert "b9934+FIX ✓ cpu (G2a)" in listed and "1a2b3c4d5 ✓ cpu (live only)" in listed
