"""Builds from source, compiled and run: a fix demoed before any release has it.

A git repository is made from the llama.cpp trees of the b9934 and b9940 sdists (two commits:
the last G1 release and the first fixed one, PR #25420), and a patch from the two commits'
``server-context.cpp`` difference. Each commit is built with ``builds install --source``, and
b9934 with ``--patch``; each is compiled once (ccache shares every unchanged object with the
release builds) and cached. A live replay of a 30-round tool-calling session then shows the
patched b9934 batching exactly like the b9940 commit, the unpatched commit exactly like the
b9934 release, and ``bisect --source`` names the second commit as the first good one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import orjson
import pytest

from replayer.core import paths
from replayer.core.builds import index, manager, source_rules
from replayer.core.builds.catalog import generation_of
from replayer.core.builds.source import SourceSpec
from replayer.core.engine import events as ev
from replayer.core.engine.live import LiveOptions, live_events, live_processes
from replayer.core.engine.schedule import Knobs

from helpers import agent_conversation
from test_live import tiny  # noqa: F401  (the tiny models fixture)

pytestmark = pytest.mark.live
RELEASES = (9859, 9934, 9940, 9981, 10001, 10865, 11434)


def _sdist(build: int) -> Path:
    return index.download(index.find_sdist(build), paths.builds_dir() / "sdists")


def _extract_tree(build: int, dest: Path) -> None:
    """The sdist's llama.cpp folder, as the contents of ``dest``."""
    with tarfile.open(_sdist(build)) as tf:
        members = [m for m in tf.getmembers() if "/llama.cpp/" in m.name]
        tf.extractall(dest / "x", members=members, filter="data")
    tree = next((dest / "x").glob("*/llama.cpp"))
    for p in tree.iterdir():
        p.rename(dest / p.name)
    subprocess.run(["rm", "-rf", str(dest / "x")], check=True)


#: fixed commit dates: the same two commits (hashes, so build identities) in every run, so their
#: builds are the cached entries after the first run, not a ccache rebuild each time
_DATES = {"GIT_AUTHOR_DATE": "2026-06-01T12:00:00Z", "GIT_COMMITTER_DATE": "2026-06-01T12:00:00Z"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True, env={**os.environ, **_DATES}).stdout


@pytest.mark.parametrize("build", RELEASES)
def test_each_releases_source_follows_its_catalog_generation(build, tmp_path):
    with tarfile.open(_sdist(build)) as tf:
        m = next(m for m in tf.getmembers() if m.name.endswith("/llama.cpp/" + source_rules.SERVER_FILE))
        text = tf.extractfile(m).read().decode()
    assert source_rules.detect_text(text).generation == generation_of(build)[0]


@pytest.fixture(scope="module")
def fix_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("llama.cpp")
    _extract_tree(9934, repo)
    _git(repo, "init", "-q", "-b", "master")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "b9934")
    for p in list(repo.iterdir()):
        if p.name != ".git":
            subprocess.run(["rm", "-rf", str(p)], check=True)
    _extract_tree(9940, repo)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "server : break the batch only where a checkpoint is due (#25420)")
    fix = repo.parent / "FIX.diff"
    fix.write_text(_git(repo, "diff", "HEAD~1", "HEAD", "--", source_rules.SERVER_FILE))
    return repo, fix


@pytest.fixture(scope="module")
def source_builds(fix_repo):
    repo, fix = fix_repo
    _git(repo, "checkout", "-q", "HEAD~1")
    old = manager.install_source(SourceSpec(tree=repo))
    _git(repo, "checkout", "-q", "master")
    new = manager.install_source(SourceSpec(tree=repo))
    patched = manager.install_source(SourceSpec(release=9934, patches=(fix,)))
    return {"old": old, "new": new, "patched": patched, "release": manager.install(9934, "cpu")}


def test_each_source_builds_once_with_the_rules_of_its_source(source_builds, fix_repo):
    b = source_builds
    assert (b["old"].generation, b["new"].generation, b["patched"].generation) == ("G1", "G2a", "G2a")
    assert len({b[k].identity for k in ("old", "new", "patched")}) == 3
    assert b["patched"].build == 9934 and b["patched"].label == "b9934+FIX"
    assert manager.find_build(9934, "cpu").source == "sdist"  # a number names the release, not the patched one
    # the same source again: the cached entry, nothing compiled
    stages = []
    again = manager.install_source(SourceSpec(release=9934, patches=(fix_repo[1],)),
                                   progress=lambda s, f: stages.append(s))
    assert again.entry == b["patched"].entry and "compile" not in stages


def _batches(binary: str, model: Path, body: dict) -> list[tuple[int, int]]:
    evs = list(live_events("A", manager.resolve_binary(binary).as_build(live=True), Knobs(memory="plain"),
                           LiveOptions(Path(binary), model), body))
    assert not [e for e in evs if isinstance(e, ev.RunFailed)], evs[-1]
    return [(e.start, e.n_tokens) for e in evs if isinstance(e, ev.BatchDone)]


def test_the_patched_release_batches_like_the_fix_and_the_unpatched_like_the_release(source_builds, tiny):
    msgs, tools = agent_conversation(rounds=30)
    body = {"messages": msgs, "tools": tools}
    got = {k: _batches(rec.binary, tiny["llama"], body) for k, rec in source_builds.items()}
    assert got["patched"] == got["new"]
    assert got["old"] == got["release"]
    assert len(got["old"]) > 2 * len(got["new"])  # G1 breaks at each of the 61 user starts
    assert live_processes() == []


def test_bisect_by_commit_names_the_fix(source_builds, fix_repo, tiny, tmp_path):
    repo, _ = fix_repo
    msgs, tools = agent_conversation(rounds=30)
    session = tmp_path / "request.json"
    session.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    env = {**os.environ}
    proc = subprocess.run([sys.executable, "-m", "replayer.cli", "bisect", str(session), "--source", str(repo),
                           "--good", "master", "--bad", "HEAD~1", "--engine", "live", "--metric", "batches",
                           "--model", str(tiny["llama"]), "--json"], capture_output=True, text=True, env=env,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr
    res = orjson.loads(proc.stdout)
    head = _git(repo, "rev-parse", "master").strip()
    assert res["first_good"]["commit"] == head and res["first_good"]["pr"] == 25420
    assert res["last_bad"]["rules"] == "G1" and res["first_good"]["rules"] == "G2a"
    assert set(res["built"]) <= {head, _git(repo, "rev-parse", "HEAD~1").strip()}


def test_a_source_that_does_not_compile_is_one_line_and_publishes_nothing(tmp_path):
    """A tree with llama.cpp's markers whose CMake configure fails: one line naming the step and
    the log, no entry, the installed builds as they were (the work folder and log are kept to be
    read, as for a release build that fails)."""
    tree = tmp_path / "broken"
    (tree / "include").mkdir(parents=True)
    (tree / "tools" / "server").mkdir(parents=True)
    (tree / "include" / "llama.h").write_text("")
    (tree / "tools" / "server" / "server-context.cpp").write_text("")
    (tree / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.14)\nproject(x)\n'
                                         'message(FATAL_ERROR "this tree does not build")\n')
    before = [r.entry for r in manager.list_builds()]
    proc = subprocess.run([sys.executable, "-m", "replayer.cli", "builds", "install", "--source", str(tree)],
                          capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("replayer: error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and len(errors) == 1
    assert "configure failed" in errors[0]
    assert [r.entry for r in manager.list_builds()] == before
    assert not list(paths.builds_dir().glob(".tmp-*"))


async def test_the_builds_screen_installs_the_patched_release(source_builds, fix_repo):
    """The screen's source row (build number above, the patch beside it, Enter) is the CLI's
    ``builds install 9934 --patch FIX.diff``: the cached entry, its rules named, listed as built."""
    from textual.widgets import Input, Static

    from replayer.ui.app import ReplayerApp
    from replayer.ui.screens.builds import BuildsScreen

    from helpers import wait_for

    patched = source_builds["patched"]
    app = ReplayerApp()
    async with app.run_test(size=(140, 45), notifications=True) as pilot:
        await pilot.pause()
        await app.push_screen(BuildsScreen())
        screen = app.screen
        for field, text in (("install-number", "9934"), ("source-patch", str(fix_repo[1]))):
            screen.query_one(f"#{field}", Input).focus()
            await pilot.press(*text)
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.installing is None and "installed" in str(
            screen.query_one("#stage", Static).render()), timeout=120)
        assert str(screen.query_one("#stage", Static).render()) == \
            f"b9934+FIX cpu installed (rules: G2a): {patched.binary}"
        assert "b9934+FIX ✓ cpu (G2a)" in str(screen.query_one("#source-builds", Static).render())
