"""Secrets planted in a session's path, title and messages never reach an output unmasked:
CLI text and JSON (inspect, layout, replay), the request body, JSONL events, Markdown, CSV,
the app's exports and SVG screenshots. ``--no-redact`` shows them, ``--redact-text`` also
masks the conversation.
"""

from __future__ import annotations

import json
import re

import pytest

from replayer.cli import main
from replayer.core import redact
from replayer.core.compare import compare
from replayer.core.replay import ReplayConfig, all_simulated, prepare

SECRETS = {
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUv12",
    "anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv",
    "huggingface": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz1234",
    "github fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrst",
    "github classic": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "google": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "gitlab": "glpat-abcdefghij1234567890",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-1234567890-abcdefghij",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}
#: credentials whose scheme word stays: (planted text, the part that must disappear)
CREDENTIALS = [
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("Authorization: Bearer abc.def-ghi_jkl123", "abc.def-ghi_jkl123"),
    ("git clone https://al:hunter22secret@example.com/r.git", "hunter22secret"),
    ("export OPENAI_API_KEY=live0123456789abcdef", "live0123456789abcdef"),
    ('{"password": "correct-horse-battery"}', "correct-horse-battery"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA"),
]
HIDDEN = list(SECRETS.values()) + [c for _, c in CREDENTIALS]


@pytest.fixture(autouse=True)
def _policy_reset():
    yield
    redact.set_policy()


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home" / "al"
    h.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture
def session(home):
    """A pi session under the home folder, a key in its folder name, keys in its title and text."""
    folder = home / f"proj-{SECRETS['openai']}"
    folder.mkdir()
    text = "my keys: " + " ; ".join(list(SECRETS.values()) + [c for c, _ in CREDENTIALS])
    rows = [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-07-01T09:00:00.000Z", "cwd": str(home)},
        {"type": "message", "id": "m1", "parentId": None, "timestamp": "2026-07-01T09:00:01.000Z",
         "message": {"role": "user", "content": text + f" (in {home}/src, not {home}ice/x)"}},
        {"type": "message", "id": "m2", "parentId": "m1", "timestamp": "2026-07-01T09:00:02.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "Noted, " + SECRETS["aws"]}],
                     "provider": "p", "model": "m", "api": "openai-completions", "stopReason": "stop"}},
        {"type": "session_info", "id": "i1", "parentId": "m2", "name": f"title {SECRETS['github classic']}"},
    ]
    p = folder / "session.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean(text: str, home) -> None:
    for secret in HIDDEN:
        assert secret not in text, secret
    assert re.search(re.escape(str(home)) + r"(?![\w.-])", text) is None  # /home/alice may stay


@pytest.mark.parametrize("name", list(SECRETS))
def test_each_key_format_is_masked(name):
    assert redact.redact(f"key={SECRETS[name]}!") in ("key=[REDACTED]!", f"key={redact.MASK}!")
    assert redact.redact(f"a {SECRETS[name]} b") == "a [REDACTED] b"


@pytest.mark.parametrize("planted,secret", CREDENTIALS)
def test_credentials_are_masked_and_their_scheme_kept(planted, secret):
    out = redact.redact(planted)
    assert secret not in out and redact.MASK in out


@pytest.mark.parametrize("text", [
    '"n_tokens": 123456789', '"tokenizer": "estimate"', '"prompt_tokens": 131072.5', "basic understanding of it",
    "the bearer of bad news", "max_token=4096", "/home/alice/x", "sk-short", "a-token: 12345678",
])
def test_ordinary_text_is_left_alone(text, monkeypatch):
    monkeypatch.setenv("HOME", "/home/al")
    assert redact.redact(text) == text


def test_home_is_replaced_only_at_a_path_boundary(monkeypatch):
    monkeypatch.setenv("HOME", "/home/al")
    assert redact.redact("/home/al/x /home/alice/x /srv/home/al/y '/home/al' /home/al.bak /home/al") == \
        "~/x /home/alice/x /srv/home/al/y '~' /home/al.bak ~"


def test_inspect_json_and_text(capsys, session, home):
    rc, out, _ = _cli(capsys, "inspect", str(session), "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["path"].startswith("~/proj-[REDACTED]/") and doc["title"] == "title [REDACTED]"
    assert_clean(out, home)
    rc, out, _ = _cli(capsys, "inspect", str(session))
    assert rc == 0 and out.startswith("~/proj-[REDACTED]/session.jsonl")
    assert_clean(out, home)


def test_inspect_request_masks_keys_and_optionally_the_text(capsys, session, home):
    rc, out, _ = _cli(capsys, "inspect", str(session), "--request")
    assert rc == 0
    assert_clean(out, home)
    user = json.loads(out)["messages"][0]["content"]
    assert "my keys: [REDACTED]" in user and "(in ~/src, not " in user  # text kept, keys gone
    assert f"{home}ice/x" in user and "~ice" not in user  # a longer name is another folder
    rc, out, _ = _cli(capsys, "inspect", str(session), "--request", "--redact-text")
    body = json.loads(out)
    assert body["messages"][0]["content"].startswith("[text: ")
    assert body["messages"][1]["content"].startswith("[text: ") and "my keys" not in out
    rc, out, _ = _cli(capsys, "inspect", str(session), "--json", "--redact-text")
    assert json.loads(out)["title"].startswith("[text: ")


def test_no_redact_shows_everything(capsys, session, home):
    rc, out, _ = _cli(capsys, "inspect", str(session), "--request", "--no-redact")
    assert rc == 0
    for secret in HIDDEN:
        assert secret in out.replace("\\n", "\n"), secret
    rc, out, _ = _cli(capsys, "inspect", str(session), "--json", "--no-redact")
    assert json.loads(out)["path"] == str(session)


@pytest.mark.parametrize("flag", ["--json", "--markdown", "--jsonl", None])
def test_replay_outputs(capsys, session, home, flag):
    rc, out, _ = _cli(capsys, "replay", str(session), *([flag] if flag else []))
    assert rc == 0 and out
    assert_clean(out, home)
    if flag == "--json":
        assert json.loads(out)["session"]["session"].startswith("~/proj-[REDACTED]/")


def test_layout_json(capsys, session, home):
    rc, out, _ = _cli(capsys, "layout", str(session), "--json")
    assert rc == 0
    assert_clean(out, home)


def test_error_lines_are_masked(capsys, home):
    rc, out, err = _cli(capsys, "inspect", str(home / SECRETS["huggingface"] / "gone.jsonl"))
    assert rc == 2 and "~/[REDACTED]/gone.jsonl" in err
    assert_clean(err, home)


@pytest.mark.parametrize("fmt", ["json", "md", "csv"])
def test_app_exports(session, home, tmp_path, fmt):
    prep = prepare(session, ReplayConfig())
    cmp = compare(all_simulated(prep))
    cmp.a.build = f"{home}/builds/{SECRETS['gitlab']}/llama-server"  # a local build's label is a path
    from replayer.core.replay import report

    text = report(prep, cmp, fmt).decode()  # what the app's export writes
    assert_clean(text, home)
    assert "~/builds/[REDACTED]/llama-server" in text


def test_svg_screenshot(capsys, session, home, tmp_path):
    shot = tmp_path / "shot.svg"
    rc, _, err = _cli(capsys, "replay", str(session), "--screenshot", str(shot))
    assert rc == 0, err
    svg = shot.read_text()
    assert "proj-" not in svg or "[REDACTED]" in svg
    assert "session.jsonl" in svg  # the title is there, masked where it needs to be
    assert_clean(svg, home)
