"""The importer registry: formats declare themselves, detection never crashes, a new format is one module."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

import replayer.core.session.formats as session_pkg
from replayer.core.errors import ImportFailed
from replayer.core.session import detect_format, load_session, registry

from fuzzing import FIXTURES, check_detection, corpus, mutated_sessions

EXPECTED = {"aider", "chat-requests", "claude-code", "cline", "codex", "continue", "crush", "gemini-cli", "goose", "kilo", "llamacpp-webui", "mini-swe-agent", "openai", "opencode", "pi", "prompt-log", "qwen-code", "sharegpt",
            "traffic-log"}


def test_every_format_module_declares_an_importer():
    assert set(registry.names()) == EXPECTED
    for imp in registry.importers().values():
        assert callable(imp.detect) and callable(imp.load)


@pytest.mark.parametrize("record", [
    b'{"sessionId":"s","uuid":"u","type":[]}\n{"sessionId":"s","uuid":"v","type":{}}\n',
    b'{"messages":[{"role":[]}]}',
    b'{"id":"x","timestamp":"t"}\n{"type":["message"]}\n',
    b'[{"conversations":[{"from":[],"value":{}}]}]',
    b'{"conv":{},"messages":[{"convId":[]}]}',
    b'{"type":"session","id":[]}\n{"type":[]}\n',
])
def test_detection_takes_malformed_records(tmp_path, record):
    """These crashed claude_code.detect and openai_body.detect (and so the app) with a TypeError."""
    f = tmp_path / "s.json"
    f.write_bytes(record)
    check_detection(f)


_FUZZ_DIR = Path(tempfile.mkdtemp(prefix="replayer-fuzz-"))
_CORPUS = corpus()


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_sessions(_CORPUS))
def test_detection_never_crashes_on_mutated_fixtures(sample):
    name, data = sample
    f = _FUZZ_DIR / Path(name).name
    f.write_bytes(data)
    check_detection(f)


FAKE_FORMAT = '''
"""A format that exists only in a test: lines that start with "FAKE:"."""
from replayer.core.session.model import ImportStats, Message, Session
from replayer.core.session.registry import Importer


def detect(head):
    return 1.0 if head.text.startswith("FAKE:") else 0.0


def load(path, options):
    lines = path.read_text().splitlines()
    msgs = [Message(role="user" if i % 2 == 0 else "assistant", content=ln[5:]) for i, ln in enumerate(lines)]
    return Session(path=str(path), format="fake", messages=msgs, stats=ImportStats(lines=len(lines)))


IMPORTER = Importer("fake", detect, load)
'''


@pytest.fixture
def fake_format_module(tmp_path, monkeypatch):
    pkg_dir = tmp_path / "formats"
    pkg_dir.mkdir()
    (pkg_dir / "fake_format.py").write_text(FAKE_FORMAT)
    monkeypatch.setattr(session_pkg, "__path__", [*session_pkg.__path__, str(pkg_dir)])
    registry.reset()
    yield
    registry.reset()
    sys.modules.pop("replayer.core.session.formats.fake_format", None)


def test_a_new_format_is_one_module(fake_format_module, tmp_path):
    f = tmp_path / "chat.txt"
    f.write_text("FAKE:hello\nFAKE:hi there\nFAKE:bye\n")
    assert detect_format(f) == "fake"
    s = load_session(f)
    assert s.format == "fake" and [m.role for m in s.messages] == ["user", "assistant", "user"]
    assert load_session(f, "fake").messages[1].content == "hi there"
    assert detect_format(FIXTURES / "pi/small-v3.jsonl") == "pi"  # the others still win their files


def test_forced_format_that_does_not_fit_says_so(tmp_path):
    f = tmp_path / "x.json"
    f.write_bytes(orjson.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    with pytest.raises(ImportFailed, match="--format sharegpt does not fit .*: it is a openai file"):
        load_session(f, "sharegpt")
    with pytest.raises(ImportFailed, match="--format aider does not fit"):
        load_session(FIXTURES / "pi/small-v3.jsonl", "aider")
    g = tmp_path / "odd.json"  # nobody recognises it: the forced importer decides
    g.write_bytes(b'{"something": "else"}')
    with pytest.raises(ImportFailed, match="is not a ShareGPT file"):
        load_session(g, "sharegpt")
