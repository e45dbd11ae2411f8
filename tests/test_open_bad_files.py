"""`replayer FILE` on a file that cannot be opened, and `replayer TYPO`: the CLI's one-line
error and exit 2; the app, given the same file, stays on the picker with the same reason and
the path in the field, ready to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Static

from replayer.cli import main
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.picker import PickerScreen

from helpers import wait_for

BAD = {
    "folder": (lambda p: p.mkdir(), "is a directory, not a session file"),
    "binary.bin": (lambda p: p.write_bytes(bytes(range(256)) * 8), "is a binary file, not a session log"),
    "empty.jsonl": (lambda p: p.write_text(""), "is empty"),
    "system.json": (lambda p: p.write_text('{"messages": [{"role": "system", "content": "Be brief."}]}'),
                    "no messages could be imported"),
}


@pytest.fixture(params=sorted(BAD))
def bad(request, tmp_path) -> tuple[Path, str]:
    make, reason = BAD[request.param]
    p = tmp_path / request.param
    make(p)
    return p, reason


def test_cli_one_line_error_and_exit_2(bad, capsys):
    path, reason = bad
    before = sorted(path.parent.rglob("*"))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("replayer: error: ") and reason in err[0]
    assert sorted(path.parent.rglob("*")) == before


async def test_app_stays_on_the_picker_with_the_reason_and_the_path(bad, capsys):
    path, reason = bad
    main([str(path)])
    cli_line = capsys.readouterr().err.strip().removeprefix("replayer: error: ")
    app = ReplayerApp(session=path)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.screen.query("#picker-error")
                       and str(app.screen.query_one("#picker-error", Static).render()))
        assert isinstance(app.screen, PickerScreen)
        assert str(app.screen.query_one("#picker-error", Static).render()) == cli_line
        field = app.screen.query_one("#path", Input)
        assert field.value == str(path) and app.focused is field


@pytest.mark.parametrize("word, command", [("inpsect", "inspect"), ("repaly", "replay"), ("bisetc", "bisect")])
def test_a_mistyped_command_is_named_as_one(word, command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([word]) == 2
    assert capsys.readouterr().err.strip() == f"replayer: error: unknown command '{word}' (did you mean {command}?)"


def test_a_missing_file_is_still_no_such_file(capsys, tmp_path):
    assert main([str(tmp_path / "gone.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
