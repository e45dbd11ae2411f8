"""Shared test helpers: where the shared spec and samples are, and CI's strictness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("REPLAYER_SHARED", REPO.parent / "shared"))
SAMPLES = SHARED / "samples"
SPEC = SHARED / "spec"
FIXTURES = REPO / "fixtures"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_shared(path: Path) -> Path:
    """Skip locally when ../shared is absent; in CI its absence is a failure."""
    if not path.exists():
        if IN_CI:
            pytest.fail(f"CI requires {path} (the shared spec and samples)")
        pytest.skip(f"{path} not present")
    return path


#: Every process this test session starts inherits this tag, so orphan checks only ever look
#: at servers of this session (not at another test run on the same machine).
SESSION_TAG = os.environ.setdefault("REPLAYER_TEST_SESSION", f"{os.getpid()}-{os.urandom(4).hex()}")


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    """Config, exports and built tokenizers go to a temp dir; the build cache stays shared (builds are slow).
    The config folder is each test's own: saved settings (the theme, the setup's mode) must not
    carry from one test into the next."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("REPLAYER_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(base / "exports"))
    monkeypatch.setenv("REPLAYER_AGENTS_DIR", str(base / "agents"))  # no capture of the user's agents
    monkeypatch.setenv("REPLAYER_TOKENIZER_CACHE", str(base / "tokenizers"))


#: The user's downloaded sdists (llama.cpp's models/ folder: vocab GGUFs and templates some
#: non-live tests read as data). Resolved before any test moves the builds folder.
_USER_SDISTS = None


@pytest.fixture(autouse=True)
def _hermetic_builds(request, tmp_path_factory, monkeypatch):
    """A non-live test sees an empty build cache (``REPLAYER_BUILDS_DIR``), so it passes the same
    with any set of builds installed, and any build step (configure, compile) fails it: only
    ``@pytest.mark.live`` tests build or run llama-server. The sdists folder is linked in: it is
    downloaded data, the same whatever is installed."""
    if request.node.get_closest_marker("live"):
        return
    global _USER_SDISTS
    from replayer.core import paths
    from replayer.core.builds import manager

    if _USER_SDISTS is None:
        _USER_SDISTS = paths.builds_dir() / "sdists"
        _USER_SDISTS.mkdir(parents=True, exist_ok=True)
    empty = tmp_path_factory.mktemp("builds")
    (empty / "sdists").symlink_to(_USER_SDISTS, target_is_directory=True)
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(empty))

    def no_build(cmd, *args, **kwargs):
        pytest.fail(f"a non-live test ran a build step ({' '.join(map(str, cmd[:3]))} …); mark it live")

    monkeypatch.setattr(manager, "_run_logged", no_build)


# The suite stands on its own: the licensed samples and the schedule vectors it reads from
# ../shared are copied under tests/data (provenance and licences in tests/data/samples/README.md),
# so a fresh clone without ../shared runs every core test.
DATA = REPO / "tests" / "data"
SAMPLES = DATA / "samples"
SPEC = DATA / "spec"
