"""``inspect --markdown`` holds the facts of ``inspect --json``, every field of it, threads
included, and is redacted as every export is: read back here row by row and compared with the
JSON, field by field, for a file of every format, a session with subagent threads and one the
replay refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import SAMPLES
from replayer.cli import main

FIXTURES = Path(__file__).parent.parent / "fixtures"
FILES = {
    "claude-code": FIXTURES / "claude-code" / "small.jsonl",
    "claude-code-sidechains": SAMPLES / "claude-code" / "claude-code-viewer_fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
    "codex": FIXTURES / "codex" / "small-rollout.jsonl",
    "pi": FIXTURES / "pi" / "small-v3.jsonl",
    "pi-compactions": SAMPLES / "pi" / "badlogic-pi-mono_v1_before-compaction.jsonl",
    "opencode-db": FIXTURES / "opencode" / "opencode.db",
    "opencode-storage": FIXTURES / "opencode" / "storage",
    "openai": FIXTURES / "openai" / "request.json",
    "sharegpt": FIXTURES / "sharegpt" / "conversations.json",
    "webui": FIXTURES / "llamacpp-webui" / "conversation.json",
}
TABLES = {"roles", "threads", "unknown_types"}
LISTS = {"missing", "warnings"}


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, escaped pipes put back."""
    inner = row.strip()[1:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def _read_back(md: str) -> dict:
    """The Markdown's facts: the first table's rows by name, each ``###`` section's table or list."""
    facts: dict = {}
    section = None
    for line in md.splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
            facts[section] = {} if section in TABLES else []
        elif line.startswith("|") and not line.startswith("|---"):
            cells = _cells(line)
            if section is None:
                if cells != ["fact", "value"]:
                    assert cells[0] not in facts, f"{cells[0]} twice"
                    facts[cells[0]] = cells[1]
            elif section in TABLES and cells[1] not in ("messages", "requests", "records"):
                facts[section][cells[0]] = int(cells[1])
        elif line.startswith("- ") and section in LISTS:
            facts[section].append(line[2:])
    return facts


def _shown(value) -> str:
    """How a JSON value reads in a table cell or list item: none as "—", a flag yes/no, one line."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def _compare(info: dict, md: str) -> None:
    facts = _read_back(md)
    assert set(facts) == set(info), set(facts) ^ set(info)
    for key, value in info.items():
        if key in TABLES:
            assert facts[key] == value and list(facts[key]) == list(value), key  # the threads in order too
        elif key in LISTS:
            assert facts[key] == [_shown(v) for v in value], key
        else:
            assert facts[key] == _shown(value), (key, facts[key], value)


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_markdown_holds_every_fact_of_the_json(name, capsys):
    f = FILES[name]
    info = json.loads(_run(capsys, ["inspect", str(f), "--json"]))
    md = _run(capsys, ["inspect", str(f), "--markdown"])
    _compare(info, md)
    if name == "claude-code-sidechains":
        assert len(info["threads"]) == 6 and "| sidechain-5 | 53 |" in md


def test_a_refused_session_in_markdown(tmp_path, capsys):
    f = tmp_path / "body.json"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "a | b"}, {"role": "assistant", "content": "x"},
                                          {"role": "assistant", "content": "y"}]}))
    info = json.loads(_run(capsys, ["inspect", str(f), "--json"]))
    md = _run(capsys, ["inspect", str(f), "--markdown"])
    assert info["replay_refused"]
    _compare(info, md)


def test_the_markdown_is_redacted_as_the_json_is_and_opts_out_the_same(tmp_path, capsys):
    """A key in the session's title and its path: masked in both by default, kept in both with
    ``--no-redact``."""
    key = "sk-ant-api03-" + "A" * 40
    f = tmp_path / f"{key}.json"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    for extra in ([], ["--no-redact"]):
        argv = ["inspect", str(f), *extra]
        out_json = _run(capsys, [*argv, "--json"])
        md = _run(capsys, [*argv, "--markdown"])
        assert (key in md) == (key in out_json) == bool(extra)
        _compare(json.loads(out_json), md)


def test_markdown_and_json_are_one_choice(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["inspect", str(FILES["openai"]), "--json", "--markdown"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("fixture,label", [
    ("codex/small-rollout.jsonl", "codex ("),  # Codex's rollout kinds are named: "(wrapped)" / "(legacy)"
])
def test_inspect_names_a_named_format_kind_in_brackets_not_as_a_version(fixture, label, capsys):
    assert main(["inspect", str(FIXTURES / fixture)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("format"))
    assert label in line and " vwrapped" not in line and " vlegacy" not in line, line
