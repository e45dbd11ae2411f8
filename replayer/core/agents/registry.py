"""The agent CLIs replayer knows how to run headless: package, pinned version, wire API, setup.

One table serves ``replayer agents capture`` (the user's installed agent, found on PATH) and
the conformance suite (the pinned npm version, installed into the cache). Each agent is run
in a temporary HOME, so nothing of the user's configuration or sessions is read or written;
``setup`` writes the config that points the agent at the local stub model, and returns the
environment it needs. Facts that hold for the pinned versions: Claude Code needs
``IS_SANDBOX=1`` as root for ``--dangerously-skip-permissions``; Codex accepts only
``wire_api = "responses"`` for a custom provider; pi sends its prompt as ``developer`` for a
reasoning model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MODEL = "scripted"


@dataclass(frozen=True)
class Agent:
    name: str  # capture key and CLI argument
    label: str
    package: str  # npm package
    version: str  # pinned for the conformance suite
    binary: str
    format: str  # replayer's importer for the files it writes
    api: str  # chat | responses | anthropic | gemini
    setup: Callable[[Path, str], dict[str, str]]  # (home, stub url) -> extra environment
    prompt: Callable[[str], list[str]]  # one headless prompt
    resume: Callable[[str], list[str]] | None  # a prompt continuing the last session (None: cannot)
    sessions: str  # glob under HOME for the session files it writes
    prompt_as_sent: bool = True  # False: the prompt the file stores is not the one sent (Codex)
    prepare: Callable[[str], list[str]] | None = None  # a command run once before (stub url -> args)
    compact: list[str] | None = None  # a headless compaction of the last session
    #: the JSON commands that compaction reads on stdin, each answered before the next (pi's RPC mode)
    compact_commands: list[dict] | None = None
    subagents: str | None = None  # glob under HOME for subagent threads' own files
    reminders: bool = False  # adds text parts before user prompts at send time, stored nowhere (Qwen Code)
    #: a run reading several prompts in one process, as stream-json lines on stdin (Qwen Code)
    prompts_stdin: list[str] | None = None
    #: the tools of the main agent that a subagent is given, by name (Cline: its built-in tools and
    #: ``spawn_agent``, not the team, MCP or configured-agent tools); None: a subagent's are its own
    subagent_tools: frozenset[str] | None = None
    #: glob under HOME for the files of subagents that send a prompt and tools of their own, stored
    #: in none of them (Qwen Code): the capture runs one and keeps its request (``Capture.subagents``)
    subagents_own: str | None = None
    #: what its summarization request carries besides the history and its prompt, for a rebuild
    #: without a capture (``Capture.compaction`` says so where there is one): the conversation's
    #: system prompt (``"prompt"``) and tools (``"prompt+tools"``), or neither (``""``)
    summary_sends: str = ""
    #: a run that compacts the last session, for ``replayer agents capture`` (default: ``compact``)
    compact_capture: list[str] | None = None


def _pi_setup(home: Path, url: str) -> dict[str, str]:
    d = home / ".pi" / "agent"
    d.mkdir(parents=True, exist_ok=True)
    (d / "models.json").write_text(json.dumps({"providers": {"stub": {
        "baseUrl": f"{url}/v1", "api": "openai-completions", "apiKey": "stub",
        "models": [{"id": MODEL, "reasoning": True}]}}}))
    # pi keeps the last 20k tokens of a compacted session (keepRecentTokens): a short session
    # would have nothing to compact
    (d / "settings.json").write_text(json.dumps({"compaction": {"keepRecentTokens": 12}}))
    return {"PI_OFFLINE": "1"}


def _pi_args(text: str) -> list[str]:
    return ["--provider", "stub", "--model", MODEL, "-p", text]


#: ``pi -c -p /compact`` sends ``/compact`` as a prompt; its RPC mode compacts on a command
_PI_COMPACT = ["--mode", "rpc", "-c", "--provider", "stub", "--model", MODEL]


def _codex_setup(home: Path, url: str) -> dict[str, str]:
    d = home / ".codex"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "stub"\napproval_policy = "never"\n'
        f'sandbox_mode = "danger-full-access"\n\n[model_providers.stub]\nname = "stub"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "STUB_API_KEY"\n')
    return {"STUB_API_KEY": "stub", "CODEX_HOME": str(d)}


def _codex_args(text: str) -> list[str]:
    return ["exec", "--skip-git-repo-check", text]


def _codex_resume(text: str) -> list[str]:
    return ["exec", "--skip-git-repo-check", "resume", "--last", text]


def _claude_setup(home: Path, url: str) -> dict[str, str]:
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "stub", "IS_SANDBOX": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
            "ANTHROPIC_MODEL": MODEL, "ANTHROPIC_SMALL_FAST_MODEL": MODEL}


def _claude_args(text: str) -> list[str]:
    return ["-p", text, "--dangerously-skip-permissions"]


def _claude_resume(text: str) -> list[str]:
    return ["-c", "-p", text, "--dangerously-skip-permissions"]


def _qwen_setup(home: Path, url: str) -> dict[str, str]:
    d = home / ".qwen"
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "openai"}},
                                                 "model": {"name": MODEL}}))
    return {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "stub", "OPENAI_MODEL": MODEL}


def _qwen_args(text: str) -> list[str]:
    return ["-p", text, "--yolo", "--auth-type", "openai", "--model", MODEL]


#: ``qwen --input-format stream-json``: each ``{"type": "user", …}`` line a prompt of the same process
_QWEN_STDIN = ["--input-format", "stream-json", "--output-format", "stream-json", "--yolo", "--auth-type",
               "openai", "--model", MODEL]


def _qwen_resume(text: str) -> list[str]:
    return ["-c", *_qwen_args(text)]


def _opencode_setup(home: Path, url: str) -> dict[str, str]:
    d = home / ".config" / "opencode"
    d.mkdir(parents=True, exist_ok=True)
    (d / "opencode.json").write_text(json.dumps({
        "autoupdate": False, "share": "disabled", "model": f"stub/{MODEL}", "small_model": f"stub/{MODEL}",
        "permission": {"edit": "allow", "bash": "allow"},
        "provider": {"stub": {"npm": "@ai-sdk/openai-compatible", "name": "stub",
                              "options": {"baseURL": f"{url}/v1", "apiKey": "stub"},
                              "models": {MODEL: {"name": MODEL, "tool_call": True, "reasoning": True}}}}}))
    return {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}


def _kilo_setup(home: Path, url: str) -> dict[str, str]:
    """Kilo's CLI (an OpenCode fork) reads OpenCode's config keys from ``~/.config/kilo/kilo.json``;
    its own environment names (``KILO_*``) replace OpenCode's."""
    d = home / ".config" / "kilo"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kilo.json").write_text(json.dumps({
        "autoupdate": False, "share": "disabled", "model": f"stub/{MODEL}", "small_model": f"stub/{MODEL}",
        "permission": {"edit": "allow", "bash": "allow"},
        "provider": {"stub": {"npm": "@ai-sdk/openai-compatible", "name": "stub",
                              "options": {"baseURL": f"{url}/v1", "apiKey": "stub"},
                              "models": {MODEL: {"name": MODEL, "tool_call": True, "reasoning": True}}}}}))
    return {"KILO_DISABLE_AUTOUPDATE": "1", "KILO_DISABLE_LSP_DOWNLOAD": "1", "KILO_DISABLE_SHARE": "1",
            "KILO_DISABLE_MODELS_FETCH": "1", "KILO_DISABLE_SESSION_INGEST": "1"}


def _cline_auth(url: str) -> list[str]:
    """Cline configures its provider through its own ``auth`` command (a written providers.json
    alone leaves it unable to connect)."""
    return ["auth", "-p", "openai-compatible", "-k", "stub", "-m", MODEL, "-b", f"{url}/v1"]


def _continue_setup(home: Path, url: str) -> dict[str, str]:
    """``cn`` reads ``~/.continue/config.yaml`` (no hub login for a local model); telemetry is
    opt-in (``CONTINUE_CLI_ENABLE_TELEMETRY``), so nothing leaves 127.0.0.1."""
    d = home / ".continue"
    d.mkdir(parents=True, exist_ok=True)
    cfg = d / "config.yaml"
    if cfg.exists() and f"apiBase: {url}/v1\n" in cfg.read_text():
        return {"CONTINUE_CLI_ENABLE_TELEMETRY": "0"}  # this run's config, options added to it kept
    cfg.write_text(
        "name: stub\nversion: 0.0.1\nschema: v1\nmodels:\n"
        f"  - name: {MODEL}\n    provider: openai\n    model: {MODEL}\n    apiBase: {url}/v1\n"
        "    apiKey: stub\n    roles: [chat, edit, apply]\n")
    return {"CONTINUE_CLI_ENABLE_TELEMETRY": "0"}


def _gemini_setup(home: Path, url: str) -> dict[str, str]:
    """Gemini CLI against the stub: the Gemini API key auth (``GOOGLE_GEMINI_BASE_URL`` is read
    for its base URL; the gateway auth type that URL alone selects is refused headless), folder
    trust off so ``--yolo`` holds in the temporary project."""
    d = home / ".gemini"
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.json").write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"},
                                                              "folderTrust": {"enabled": False}}}))
    return {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "stub"}


#: Cline 3.0.65's subagent tools (``createSubAgentTools``: the built-in tools of the mode and
#: ``spawn_agent``, ``@cline/core`` 0.0.86 ``dist/index.js:841``; the built-in ids are ``tk`` of
#: ``dist/index.js:209``), measured: the parent's first 7 of 25 tools, whole
_CLINE_SUBAGENT_TOOLS = frozenset({"read_files", "search_codebase", "run_commands", "fetch_web_content",
                                   "apply_patch", "editor", "ask_question", "spawn_agent"})

AGENTS: dict[str, Agent] = {a.name: a for a in (
    Agent("pi", "pi", "@mariozechner/pi-coding-agent", "0.73.1", "pi", "pi", "chat", _pi_setup, _pi_args,
          lambda t: ["-c", *_pi_args(t)], ".pi/agent/sessions/*/*.jsonl", compact=_PI_COMPACT,
          compact_commands=[{"type": "compact"}]),
    Agent("codex", "Codex", "@openai/codex", "0.171.0", "codex", "codex", "responses", _codex_setup, _codex_args,
          _codex_resume, ".codex/sessions/*/*/*/rollout-*.jsonl", prompt_as_sent=False, summary_sends="prompt",
          compact_capture=["exec", "--skip-git-repo-check", "-c", "model_auto_compact_token_limit=50", "resume",
                           "--last", "And one more."]),
    Agent("claude", "Claude Code", "@anthropic-ai/claude-code", "2.1.332", "claude", "claude-code", "anthropic",
          _claude_setup, _claude_args, _claude_resume, ".claude/projects/*/*.jsonl",
          compact=_claude_resume("/compact"), subagents=".claude/projects/*/*/subagents/agent-*.jsonl",
          summary_sends="prompt+tools"),
    Agent("qwen", "Qwen Code", "@qwen-code/qwen-code", "0.24.4", "qwen", "qwen-code", "chat", _qwen_setup,
          _qwen_args, _qwen_resume, ".qwen/projects/*/chats/*.jsonl", reminders=True, prompts_stdin=_QWEN_STDIN,
          subagents_own=".qwen/projects/*/subagents/*/agent-*.jsonl", summary_sends="prompt+tools",
          compact_capture=_qwen_resume("/compress")),
    Agent("opencode", "OpenCode", "opencode-ai", "1.18.33", "opencode", "opencode", "chat", _opencode_setup,
          lambda t: ["run", t], lambda t: ["run", "-c", t], ".local/share/opencode/opencode.db"),
    Agent("kilo", "Kilo", "@kilocode/cli", "7.7.7", "kilo", "kilo", "chat", _kilo_setup,
          lambda t: ["run", "--auto", t], lambda t: ["run", "--auto", "-c", t], ".local/share/kilo/kilo.db"),
    # Cline's CLI cannot continue a session headless
    Agent("cline", "Cline", "cline", "3.0.65", "cline", "cline", "chat", lambda home, url: {},
          lambda t: ["--json", t], None, ".cline/data/sessions/*/*.messages.json", prepare=_cline_auth,
          subagent_tools=_CLINE_SUBAGENT_TOOLS),
    Agent("gemini", "Gemini CLI", "@google/gemini-cli", "0.61.0", "gemini", "gemini-cli", "gemini", _gemini_setup,
          lambda t: ["-p", t, "--yolo", "-m", MODEL], lambda t: ["-p", t, "--resume", "latest", "--yolo", "-m", MODEL],
          ".gemini/tmp/*/chats/session-*.jsonl", subagents_own=".gemini/tmp/*/chats/*/*.jsonl"),
    # ``cn -p --auto``: headless, every tool allowed; its sessions are ``<uuid>.json`` beside a
    # ``sessions.json`` index
    Agent("continue", "Continue", "@continuedev/cli", "1.5.47", "cn", "continue", "chat", _continue_setup,
          lambda t: ["-p", "--auto", t], lambda t: ["-p", "--auto", "--resume", t], ".continue/sessions/*-*.json"),
)}


def agent_of_format(fmt: str) -> str | None:
    """The agent whose session files the importer ``fmt`` reads."""
    return next((a.name for a in AGENTS.values() if a.format == fmt), None)
