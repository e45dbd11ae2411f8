"""The wheel, installed outside the checkout, has its themes and renders the bundled demo.

One clean venv in a temp dir; each built-in theme renders the demo's verdict with
``replayer replay <bundled demo> --screenshot``. The wheel is installed without its
dependencies, which the venv reads from this interpreter's site-packages through a ``.pth``
line (downloading numpy, tokenizers and Textual again took six minutes here). ``replayer``
itself can only come from the wheel: the development install's own ``.pth`` hooks are not
processed in a directory added that way, and the test checks where it was imported from.
Set ``REPLAYER_WHEEL_FULL_INSTALL=1`` to install the dependencies from the index instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", REPO], cwd=tmp)
    wheels = list((tmp / "dist").glob("replayer-*.whl"))
    assert len(wheels) == 1
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()  # the top-level themes/ files, each in the wheel
    shipped = sorted(Path(n).name for n in names if "/share/replayer/themes/" in n)
    assert shipped == sorted(p.name for p in (REPO / "themes").glob("*.toml")) and len(shipped) == 3
    _run([sys.executable, "-m", "venv", tmp / "venv"], cwd=tmp)
    py = tmp / "venv" / "bin" / "python"
    if os.environ.get("REPLAYER_WHEEL_FULL_INSTALL"):
        _run([py, "-m", "pip", "install", "-q", wheels[0]], cwd=tmp)
        return tmp
    _run([py, "-m", "pip", "install", "-q", "--no-deps", wheels[0]], cwd=tmp)
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).stdout.strip()
    here = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "zz-dev-deps.pth").write_text("\n".join(here) + "\n")
    return tmp


def test_installed_wheel_lists_its_themes_and_renders_the_demo_in_each(installed):
    tmp = installed
    py = tmp / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["HOME"] = str(tmp / "home")  # no config, no ~/Downloads
    env["REPLAYER_CONFIG_DIR"] = str(tmp / "config")
    out = _run([py, "-c", "import json, replayer.ui.themes as t, replayer.core.replay as r; "
                "print(json.dumps({'themes': sorted(x.name for x in t.load_all()[0]), "
                "'dir': str(t.BUNDLED_DIR), 'demo': str(r.demo_session_path())}))"], cwd=tmp, env=env)
    facts = json.loads(out.stdout)
    assert facts["dir"].startswith(str(tmp / "venv")), "the themes come from the installed wheel"
    assert facts["themes"] == ["high-contrast", "replayer-dark", "replayer-light"]
    # what a user runs to see them
    listed = json.loads(_run([tmp / "venv" / "bin" / "replayer", "presets", "--json"], cwd=tmp, env=env).stdout)
    builtin = [t for t in listed["themes"]["themes"] if t["source"] == "built in"]
    assert [t["name"] for t in builtin] == facts["themes"]
    assert all(t["file"].startswith(str(tmp / "venv")) for t in builtin)
    text = _run([tmp / "venv" / "bin" / "replayer", "presets"], cwd=tmp, env=env).stdout
    assert all(f"  {name}" in text for name in facts["themes"])
    for theme in facts["themes"]:
        (tmp / "config").mkdir(exist_ok=True)
        (tmp / "config" / "settings.json").write_text(json.dumps({"theme": theme}))
        shot = tmp / "shots" / f"{theme}.svg"
        _run([tmp / "venv" / "bin" / "replayer", "replay", facts["demo"], "--screenshot", shot], cwd=tmp, env=env)
        svg = shot.read_text()
        background = next(line.split('"')[1] for line in
                          (REPO / "themes" / f"{theme}.toml").read_text().splitlines()
                          if line.startswith("background"))
        assert background.lower() in svg.lower(), theme
        assert "b9859" in svg and "b10001" in svg and "faster" in svg
