"""The real agent CLIs, pinned, installed from npm into the user cache (outside the repo).

Installed once (``npm install --prefix ~/.cache/replayer/npm/<package>@<version>``); a missing
npm or registry skips the agent's tests (fails them in CI). Each agent then runs in a
temporary HOME and project against the scripted stub model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from replayer.core.agents.registry import AGENTS, Agent


NPM_CACHE = Path("~/.cache/replayer/npm").expanduser()
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def install_dir(agent: Agent) -> Path:
    return NPM_CACHE / f"{agent.package.replace('/', '+')}@{agent.version}"


def agent_binary(agent: Agent) -> Path:
    """The pinned CLI, installed on first use."""
    d = install_dir(agent)
    binary = d / "node_modules" / ".bin" / agent.binary
    if binary.exists():
        return binary
    if shutil.which("npm") is None:
        (pytest.fail if IN_CI else pytest.skip)("npm not found")
    d.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["npm", "install", "--prefix", str(d), "--no-audit", "--no-fund", "--loglevel=error",
                        f"{agent.package}@{agent.version}"], capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not binary.exists():
        (pytest.fail if IN_CI else pytest.skip)(f"npm install {agent.package}@{agent.version}: {r.stderr[-300:]}")
    return binary


@pytest.fixture(params=sorted(AGENTS), scope="session")
def agent(request) -> Agent:
    return AGENTS[request.param]


def run_subagent(agent: Agent, home: Path) -> list:
    """The agent run headless in ``home``'s ``project`` folder (one file, hello.txt) on a prompt
    the stub answers with its Task tool (a subagent); the requests the stub received, in order."""
    from replayer.core.agents.run import run
    from replayer.core.agents.stub_model import ModelServer

    project = home / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt")) as m:
        r = run(agent, agent_binary(agent), agent.prompt("SUBAGENT: have a helper look around"),
                home=home, project=project, url=m.url)
        assert r.returncode == 0, r.stderr[-300:]
        return m.log
