"""Discovery, request overrides, the layout CLI, calibration fitting."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import orjson

from replayer.core.engine import events as ev
import pytest

from replayer.core.session.discover import discover

from conftest import FIXTURES, REPO


def test_discover_default_folders_newest_first(tmp_path, monkeypatch):
    home = tmp_path / "home"
    pi = home / ".pi" / "agent" / "sessions" / "--w--"
    cc = home / ".claude" / "projects" / "-w"
    cx = home / ".codex" / "sessions" / "2026" / "07" / "01"
    for d in (pi, cc, cx):
        d.mkdir(parents=True)
    shutil.copy(FIXTURES / "pi/small-v3.jsonl", pi / "a.jsonl")
    shutil.copy(FIXTURES / "claude-code/small.jsonl", cc / "b.jsonl")
    shutil.copy(FIXTURES / "codex/small-rollout.jsonl", cx / "rollout-x.jsonl")
    os.utime(pi / "a.jsonl", (1, 1_000))
    os.utime(cc / "b.jsonl", (1, 3_000))
    os.utime(cx / "rollout-x.jsonl", (1, 2_000))
    monkeypatch.setenv("HOME", str(home))
    for var in ("PI_CODING_AGENT_DIR", "PI_CODING_AGENT_SESSION_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert [f.agent for f in discover()] == ["claude-code", "codex", "pi"]
    monkeypatch.setenv("PI_CODING_AGENT_SESSION_DIR", str(tmp_path / "custom"))
    (tmp_path / "custom").mkdir()
    shutil.copy(FIXTURES / "pi/small-v3.jsonl", tmp_path / "custom" / "c.jsonl")
    assert "pi" in [f.agent for f in discover()] and any(f.path.parent.name == "custom" for f in discover())


CLINE_VARS = ("CLINE_SESSION_DATA_DIR", "CLINE_DATA_DIR", "CLINE_DIR", "XDG_CONFIG_HOME", "APPDATA")


def test_discover_clines_folders_the_cli_and_each_editors_extensions(tmp_path, monkeypatch):
    from cline_home import SUB_FILE, cli_session, vscode_task
    from replayer.core.session.listing import listing

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(sys, "platform", "linux")
    for var in CLINE_VARS + ("PI_CODING_AGENT_DIR", "PI_CODING_AGENT_SESSION_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME",
                             "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    info = [{"tokensIn": 900, "cacheReads": 0, "apiProtocol": "openai"}] * 2
    storage = home / ".config"
    made = {
        cli_session(home, [None] * 3): "cline",
        vscode_task(storage / "Code/User/globalStorage/saoudrizwan.claude-dev", "1796354000001", info): "cline",
        vscode_task(storage / "Cursor/User/globalStorage/rooveterinaryinc.roo-cline", "t-roo", info): "roo-code",
        vscode_task(storage / "VSCodium/User/globalStorage/kilocode.kilo-code", "t-kilo", info): "kilo-code",
        vscode_task(home / ".vscode-server/data/User/globalStorage/saoudrizwan.claude-dev", "t-ssh", info): "cline",
        vscode_task(home / ".kilocode/cli/global", "t-kilo-cli", info): "kilo-code",
    }
    # not Cline's: another extension's tasks, a task folder without its history
    vscode_task(storage / "Code/User/globalStorage/someone.else", "t-x", info)
    (storage / "Code/User/globalStorage/saoudrizwan.claude-dev/tasks/empty").mkdir()
    found = {f.path: f.agent for f in discover()}
    sub = next(iter(made)).with_name(SUB_FILE)
    assert found == {**made, sub: "cline"}
    # the subagent's file is a thread of its session, hidden like Claude Code's
    assert [x.kind for x in listing([f for f in discover() if f.path == sub])] == ["subagent"]
    assert {x.kind for x in listing([f for f in discover() if f.path != sub])} == {"session"}
    # the CLI's overrides, as its resolveSessionDataDir reads them
    monkeypatch.setenv("CLINE_DIR", str(tmp_path / "cdir"))
    assert not any(f.path.is_relative_to(home / ".cline") for f in discover())
    cli_session(tmp_path / "cdir", [None] * 3, "s2")
    moved = tmp_path / "cdir" / ".cline"  # cli_session writes <base>/.cline/data/sessions: CLINE_DIR is that .cline
    monkeypatch.setenv("CLINE_DIR", str(moved))
    assert any(f.path.name == "s2.messages.json" for f in discover())
    monkeypatch.setenv("CLINE_SESSION_DATA_DIR", str(home / ".cline/data/sessions"))
    assert any(f.path == next(iter(made)) for f in discover())
    # macOS keeps the editors' folders under Library/Application Support
    monkeypatch.setattr(sys, "platform", "darwin")
    mac = vscode_task(home / "Library/Application Support/Code - Insiders/User/globalStorage/saoudrizwan.claude-dev",
                      "t-mac", info)
    assert found.keys() - {f.path for f in discover()} == {p for p in made if ".config" in str(p)}
    assert mac in {f.path for f in discover()}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_system_prompt_and_tools_overrides(tmp_path):
    sp = tmp_path / "system.txt"
    sp.write_text("You are pi.")
    tools = tmp_path / "tools.json"
    tools.write_bytes(orjson.dumps([{"name": "bash", "description": "run", "parameters": {"type": "object"}}]))
    body = orjson.loads(_cli("inspect", str(FIXTURES / "pi/small-v3.jsonl"), "--request",
                             "--system-prompt", str(sp), "--tools", str(tools)).stdout)
    assert body["messages"][0] == {"role": "system", "content": "You are pi."}
    assert body["tools"][0]["function"]["name"] == "bash"
    info = orjson.loads(_cli("inspect", str(FIXTURES / "pi/small-v3.jsonl"), "--json", "--system-prompt", str(sp),
                             "--tools", str(tools)).stdout)
    assert info["missing"] == []
    r = _cli("inspect", str(FIXTURES / "pi/small-v3.jsonl"), "--tools", str(sp))
    assert r.returncode == 2 and "is not JSON" in r.stderr


def test_layout_cli_json():
    out = orjson.loads(_cli("layout", str(FIXTURES / "openai/request.json"), "--json", "--build", "9859").stdout)
    assert out["tokenizer"] == "estimate" and out["template"] == "chatml" and out["build"] == "b9859"
    assert len(out["user_starts"]) == 2  # the user question and the tool result (ChatML renders it as user)
    assert {"role": "user", "text": "<|im_start|>user"} in out["delimiters"]
    r = _cli("layout", str(FIXTURES / "openai/request.json"), "--tokenizer", "bpe:x")
    assert r.returncode == 2 and "unknown tokenizer" in r.stderr


def test_calibration_fit_recovers_the_cost_model():
    from replayer.core.calibration import fit_cost
    from replayer.core.hardware.cost import LineCost, batch_ms

    truth = LineCost("truth", fixed_ms=12.0, per_token_ms=0.25, attn_ms=2e-6, attn_small_ms=4e-5)
    batches, t, start = [], 0.0, 0
    for i, n in enumerate([2048, 700, 35, 2048, 1200, 90, 2048, 300, 40, 20, 600, 50]):
        ms = batch_ms(truth, start, n, 512)
        batches.append(ev.BatchDone("A", i, start, n, -(-n // 512), "n_batch", t, t + ms))
        t += ms
        start += n
    fit = fit_cost(batches, 512)
    assert fit == (pytest.approx(12.0), pytest.approx(0.25), pytest.approx(2e-6), pytest.approx(4e-5), 0)
    # the CPU line's whole query tiles: fitted per tile, the same constants come back, tile kept
    tiled = LineCost("truth", fixed_ms=12.0, per_token_ms=0.25, attn_ms=2e-6, attn_small_ms=4e-5, q_tile=64)
    retimed, t = [], 0.0
    for b in batches:
        ms = batch_ms(tiled, b.start, b.n_tokens, 512)
        retimed.append(ev.BatchDone("A", b.index, b.start, b.n_tokens, b.n_ubatches, "n_batch", t, t + ms))
        t += ms
    assert fit_cost(retimed, 512, q_tile=64) == (pytest.approx(12.0), pytest.approx(0.25), pytest.approx(2e-6),
                                                 pytest.approx(4e-5), 64)
    # one short ubatch (a prompt's last) cannot price short ubatches: that term stays 0
    few = [b for b in batches if b.n_tokens >= 64 or b.n_tokens == 35]
    assert fit_cost(few, 512).attn_small_ms == 0
    same_size = [b for b in batches if b.n_tokens == 2048]
    assert all(x >= 0 for x in fit_cost(same_size, 512))  # degenerate data never yields negative costs
