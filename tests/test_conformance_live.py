"""Conformance: replayer's rendered prompt and token ids against real llama-server builds.

For every fixture session and every bundled template (carried by a tiny GGUF with the real
Qwen2 or Llama-3 vocabulary of the sdist, or the built-in one), ``compute_layout``'s text
must equal the server's ``/apply-template`` byte for byte and its ids the server's
``/tokenize``, on b9859 and b10001. A request the server refuses must be refused by
replayer too. One server per (build, model), started once for the module.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from replayer.core.builds import manager
from replayer.core.builds.catalog import parse_build
from replayer.core.engine import events as ev
from replayer.core.engine.live import LiveOptions, LiveResult, LiveServer, live_events
from replayer.core.engine.schedule import Knobs
from replayer.core.errors import ReplayerError
from replayer.core.prompt import gguf_tokenizer, templates
from replayer.core.prompt.layout import compute_layout
from replayer.core.prompt.server_tokenizer import ServerTokenizer
from replayer.core.session import build_request, load_session
from replayer.core.tiny_models import make_tiny

from conftest import FIXTURES, REPO
from helpers import agent_conversation
from test_live import binaries  # noqa: F401  (the real builds, one fixture for both modules)

#: the builds whose message preparation was read in the sdists (docs/design.md, "Rendering as the
#: server renders"); G3's (b11434) has not been read yet, so it is not claimed here
BUILDS = (9859, 10001)

pytestmark = pytest.mark.live
LONG = FIXTURES / "openai" / "agent-45-rounds.json"

#: model id → (arch, template (bundled name or sdist template file), vocab GGUF of the sdist or None)
MODELS = {
    "chatml": ("llama", "chatml", "qwen2"),
    "qwen3-coder": ("llama", "qwen3-coder", "qwen2"),
    "llama3": ("llama", "llama3", "llama-bpe"),
    "gemma": ("llama", "gemma", None),
    "gpt-oss": ("llama", "gpt-oss", None),
    "qwen2.5-llama": ("llama", "Qwen-Qwen2.5-7B-Instruct", "qwen2"),
    "qwen2.5-gemma2": ("gemma2", "Qwen-Qwen2.5-7B-Instruct", "qwen2"),
    "qwen2.5-lfm2": ("lfm2", "Qwen-Qwen2.5-7B-Instruct", "qwen2"),
    "gemma-2-real": ("llama", "google-gemma-2-2b-it", None),
}


def _sessions() -> list[Path]:
    found = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".md", ".db")
                   and "storage" not in p.parts)
    return found + [REPO / "replayer" / "data" / "demo" / "seed-session.jsonl"]


SESSIONS = _sessions()


def _bodies() -> list[tuple[str, dict]]:
    out = []
    for p in SESSIONS:
        req = build_request(load_session(p))
        out.append((str(p.relative_to(REPO)), {"messages": req.messages, "tools": req.body.get("tools")}))
    msgs, tools = agent_conversation(rounds=6)
    out.append(("helpers.agent_conversation", {"messages": msgs, "tools": tools}))
    # shapes no stored session has: an empty tool list, a typed-only user, an empty final user
    out.append(("edge:typed-and-empty", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "sys A"}, {"type": "text", "text": "sys B"}]},
        {"role": "user", "content": ""}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "x"}]}], "tools": []}))
    out.append(("edge:invalid-arguments", {"messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": "}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}, {"role": "user", "content": "next"}]}))
    out.append(("edge:image", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}))
    return out


def first_difference(ours: str | list, theirs: str | list) -> str:
    n = min(len(ours), len(theirs))
    i = next((k for k in range(n) if ours[k] != theirs[k]), n)
    return (f"first difference at {i} (lengths {len(ours)} vs {len(theirs)}):\n"
            f"  replayer {ours[max(0, i - 60):i + 80]!r}\n  server   {theirs[max(0, i - 60):i + 80]!r}")


class _Models(dict):
    """Tiny GGUFs carrying each template, made on first use."""

    def __init__(self, d: Path) -> None:
        super().__init__()
        self.d, self.vocab_dir = d, manager.sdist_models_dir(9859)

    def __missing__(self, mid: str) -> Path:
        arch, tpl, vocab = MODELS[mid]
        src = (templates.bundled(tpl).source if tpl in templates.BUNDLED
               else (self.vocab_dir / "templates" / f"{tpl}.jinja").read_text(encoding="utf-8"))
        self[mid] = make_tiny(arch, self.d / f"{mid}.gguf", chat_template=src,
                              vocab=str(self.vocab_dir / f"ggml-vocab-{vocab}.gguf") if vocab else None)
        return self[mid]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return _Models(tmp_path_factory.mktemp("conformance"))


class _Servers:
    """One server per (build, model), started on first use and kept for the module."""

    def __init__(self, binaries, models) -> None:
        self.binaries, self.models, self.started = binaries, models, {}
        self.client = httpx.Client(timeout=120)

    def __getitem__(self, key: tuple[int, str]) -> str:
        if key not in self.started:
            srv = LiveServer(LiveOptions(self.binaries[key[0]], self.models[key[1]]), Knobs(), 65536)
            self.started[key] = srv
            srv.start()
            srv.wait_healthy(self.client)
        return self.started[key].url

    def close(self) -> None:
        for srv in self.started.values():
            srv.stop()
        self.client.close()


@pytest.fixture(scope="module")
def servers(binaries, models):
    s = _Servers(binaries, models)
    try:
        yield s
    finally:
        s.close()


def _apply(url: str, body: dict) -> str | None:
    r = httpx.post(url + "/apply-template", json={k: v for k, v in body.items() if v is not None}, timeout=120)
    return r.json()["prompt"] if r.status_code == 200 else None


@pytest.mark.parametrize("mid", list(MODELS))
@pytest.mark.parametrize("build", BUILDS)
def test_layout_text_and_ids_equal_the_servers(servers, models, build, mid):
    url = servers[(build, mid)]
    st = ServerTokenizer(url)
    tok = gguf_tokenizer.load(str(models[mid]))
    checked = refused = 0
    for name, body in _bodies():
        theirs = _apply(url, body)
        try:
            lay = compute_layout(body["messages"], body.get("tools"), tokenizer=f"gguf:{models[mid]}", build=str(build),
                                 keep_text=True)
        except ReplayerError as exc:
            assert theirs is None, f"{name}: replayer refused ({exc}) what the server renders"
            refused += 1
            continue
        assert theirs is not None, f"{name}: the server refuses what replayer renders"
        assert lay.text == theirs, f"{name} on {mid}/b{build}: " + first_difference(lay.text, theirs)
        ours_ids, their_ids = tok.encode(theirs), st.encode(theirs)
        assert ours_ids == their_ids, f"{name} on {mid}/b{build} ids: " + first_difference(ours_ids, their_ids)
        assert lay.n_tokens == len(their_ids)
        checked += 1
    if mid == "gemma-2-real":  # Gemma 2's own template refuses any tool turn; the server agrees
        assert checked >= 1 and refused >= len(SESSIONS)
    else:  # every fixture session renders on every bundled and Qwen2.5 template
        assert checked >= len(SESSIONS) and refused == 2  # invalid arguments, an image without a projector


@pytest.mark.parametrize("mid", list(MODELS))
def test_template_caps_equal_the_servers(servers, mid):
    """The probe that decides object arguments, system role and content type, against /props."""
    props = httpx.get(servers[(BUILDS[0], mid)] + "/props", timeout=30).json()
    theirs = props["chat_template_caps"]
    ours = templates.caps_of(props["chat_template"])
    assert (ours.object_arguments, ours.system_role, ours.typed_content, ours.string_content, ours.tool_calls) == (
        theirs["supports_object_arguments"], theirs["supports_system_role"], theirs["supports_typed_content"],
        theirs["supports_string_content"], theirs["supports_tool_calls"])


@pytest.mark.parametrize("mid", ["qwen2.5-llama", "qwen2.5-gemma2", "qwen2.5-lfm2"])
@pytest.mark.parametrize("build", BUILDS)
def test_long_tool_conversation_cli_layout_is_the_servers(servers, models, build, mid):
    """The issue's case: a ≥40-round tool conversation through ``replayer layout --tokenizer
    gguf:M.gguf --json`` gives the server's n_tokens and user starts."""
    body = orjson.loads(LONG.read_bytes())
    assert sum(1 for m in body["messages"] if m.get("tool_calls")) >= 40
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "layout", str(LONG), "--tokenizer", f"gguf:{models[mid]}",
                        "--build", str(build), "--json"], capture_output=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    ours = orjson.loads(r.stdout)
    server = compute_layout(body["messages"], body["tools"], tokenizer=f"server:{servers[(build, mid)]}",
                            build=str(build))
    assert ours["n_tokens"] == server.n_tokens and ours["user_starts"] == server.user_starts
    assert len(server.user_starts) > 40


def test_long_tool_conversation_user_starts_are_where_b9859_breaks(binaries, models):
    """The server's own span split, seen through its batches: b9859 ends a batch at every user
    start, so a live prefill of the long conversation shows the server's user starts."""
    body = orjson.loads(LONG.read_bytes())
    ours = compute_layout(body["messages"], body["tools"], tokenizer=f"gguf:{models['qwen2.5-llama']}", build="9859")
    res = LiveResult()
    evs = list(live_events("A", parse_build("9859"), Knobs(), LiveOptions(binaries[9859], models["qwen2.5-llama"]),
                           body, result=res))
    assert not [e for e in evs if isinstance(e, ev.RunFailed)], evs[-1]
    breaks = [e.end for e in evs if isinstance(e, ev.BatchDone) and e.reason == "user_start"]
    assert res.progress[-1] == ours.n_tokens
    assert breaks == [u for u in ours.user_starts if u > 0]
