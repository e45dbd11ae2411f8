"""What the importer noticed reaches every output of a replay (issue 24): a truncated session
gives a verdict that says it is on part of the session, in text, JSON, JSONL and Markdown."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from conftest import FIXTURES, REPO

PI = FIXTURES / "pi" / "small-v3.jsonl"


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    data = PI.read_bytes().rstrip(b"\n")
    f = tmp_path_factory.mktemp("notes") / "cut.jsonl"
    f.write_bytes(data[: len(data) - 25])  # the last line cut mid-record, as a running agent leaves it
    return f


def _replay(f, *extra):
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(f), *extra], capture_output=True,
                       text=True, cwd=REPO, timeout=300)
    assert "Traceback" not in r.stderr
    return r


@pytest.mark.parametrize("mode", ["resume", "session"])
def test_text_verdict_says_incomplete(truncated, mode):
    r = _replay(truncated, "--mode", mode)
    assert r.returncode == 0
    assert "incomplete session: 1 line(s) of the file did not parse (the last one cut off)" in r.stdout
    assert "skipped the last line that did not parse" in r.stdout


@pytest.mark.parametrize("mode", ["resume", "session"])
def test_json_carries_notes(truncated, mode):
    doc = orjson.loads(_replay(truncated, "--mode", mode, "--json").stdout)
    assert doc["session"]["incomplete"].startswith("incomplete session")
    assert any("did not parse" in n for n in doc["session"]["notes"])


def test_markdown_carries_warning_and_notes(truncated):
    md = _replay(truncated, "--markdown").stdout
    assert "> **Warning:** incomplete session" in md and "### Notes" in md


@pytest.mark.parametrize("mode", ["resume", "session"])
def test_jsonl_first_record_is_the_notes(truncated, mode):
    first = orjson.loads(_replay(truncated, "--mode", mode, "--jsonl").stdout.splitlines()[0])
    assert first["type"] == "session_notes" and first["incomplete"]


def test_whole_session_has_no_caveat():
    r = _replay(PI)
    assert "incomplete session" not in r.stdout
    first = orjson.loads(_replay(PI, "--jsonl").stdout.splitlines()[0])
    assert first["type"] == "run_started"


def test_app_screenshot_verdict_carries_the_caveat(truncated, tmp_path):
    svg = tmp_path / "cut.svg"
    r = _replay(truncated, "--screenshot", str(svg))
    assert r.returncode == 0, r.stderr
    assert "incomplete&#160;session:&#160;1&#160;line(s)" in svg.read_text()
