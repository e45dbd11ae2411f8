"""CLI input checks: numbers with their ranges, forced formats that do not fit, unwritable stdout.

Each bad input must end as one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import FIXTURES, REPO
from replayer.cli import main

PI = str(FIXTURES / "pi" / "small-v3.jsonl")


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse exits; main's own errors return
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv,needle", [
    (["schedule", "--tokens", "1000", "--build", "9859", "-b", str(10 ** 12)], "-b/--batch-size"),
    (["schedule", "--tokens", "1000", "--build", "9859", "-ub", "0"], "-ub/--ubatch-size"),
    (["schedule", "--tokens", "-5", "--build", "9859"], "--tokens"),
    (["schedule", "--tokens", "1e3", "--build", "9859"], "not a whole number"),
    (["schedule", "--tokens", "1000", "--build", "9859", "--ctx-checkpoints", "-1"], "--ctx-checkpoints"),
    (["schedule", "--tokens", "1000", "--build", "9859", "--n-past", "-1"], "--n-past"),
    (["schedule", "--tokens", "1000", "--build", "9859", "--swa-window", "0"], "--swa-window"),
    (["schedule", "--tokens", "1000", "--build", "9859", "--cms", "-3"], "--cms"),
    (["replay", PI, "--speed", "nan"], "not a finite number"),
    (["replay", PI, "--speed", "-1"], "--speed"),
    (["replay", PI, "--speed", "inf"], "not a finite number"),
    (["replay", PI, "--ctx-size", "-1"], "--ctx-size"),
    (["replay", PI, "--ctx-size", "0"], "--ctx-size"),
    (["replay", PI, "--timeout", "0"], "--timeout"),
    (["replay", PI, "--timeout", "nan"], "--timeout"),
])
def test_numeric_options_out_of_range_are_one_line_exit_2(capsys, argv, needle):
    rc, out, err = _run(capsys, argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and err.startswith("replayer: error:")


def test_numeric_options_in_range_still_work(capsys):
    rc, out, _ = _run(capsys, ["schedule", "--tokens", "10_000", "--build", "9859", "-b", "4096", "-ub", "4096",
                               "--json"])
    assert rc == 0 and '"n_tokens": 10000' in out


def test_forced_format_that_does_not_fit_is_refused(capsys):
    rc, out, err = _run(capsys, ["inspect", PI, "--format", "aider"])
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "--format aider does not fit" in err and "pi file" in err
    rc, _, err = _run(capsys, ["inspect", PI, "--format", "codex"])
    assert rc == 2 and "--format codex does not fit" in err


def test_forced_format_that_fits_is_taken(capsys):
    rc, out, _ = _run(capsys, ["inspect", PI, "--format", "pi", "--json"])
    assert rc == 0 and '"format": "pi"' in out
    aider = next((FIXTURES / "aider").iterdir())
    rc, out, _ = _run(capsys, ["inspect", str(aider), "--format", "aider", "--json"])
    assert rc == 0 and '"format": "aider"' in out


def test_forced_format_on_an_unrecognised_file_is_left_to_its_importer(capsys, tmp_path):
    md = tmp_path / "chat.md"
    md.write_text("#### hello\n\nhi there\n")  # no aider header: detection cannot tell
    rc, out, _ = _run(capsys, ["inspect", str(md), "--format", "aider", "--json"])
    assert rc == 0 and '"messages": 2' in out


def test_stdout_to_dev_full_is_one_line_not_a_traceback():
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "replayer.cli", "schedule", "--tokens", "1000", "--build", "9859",
                            "--json"], stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2
    assert r.stderr == "replayer: error: cannot write to standard output: No space left on device\n"
