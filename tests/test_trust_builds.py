"""A damaged build record is reported by ``builds list``, not left out without a word (issue 24)."""

from __future__ import annotations

from replayer.cli import main


def test_builds_list_names_damaged_records(tmp_path, monkeypatch, capsys):
    root = tmp_path / "builds"
    (root / "b9859-cpu").mkdir(parents=True)
    (root / "b9859-cpu" / "build.json").write_bytes(b'{"build": 9859, "backend": ')
    (root / "not-a-build").mkdir()  # an entry without a record is no build, and no note
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(root))
    assert main(["builds", "list"]) == 0
    out, err = capsys.readouterr()
    assert "no builds installed" in out
    assert err.count("note:") == 1 and "b9859-cpu: its build record" in err and "damaged" in err
    assert main(["builds", "list", "--json"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "[]" and "b9859-cpu" in err
    assert (root / "b9859-cpu" / "build.json").read_bytes() == b'{"build": 9859, "backend": '
