"""Template conformance against a real llama-server: every template of the build's sdist.

One router-mode server per build (``--models-preset``): one preset per
``models/templates/*.jinja``, each the same tiny GGUF with that template as its chat template,
so one process answers for all templates (the router starts an instance per template, a few
at a time), and one preset, kept loaded, with the sdist's vocabulary (qwen2 unless told) for
``/tokenize``. The template instances carry the tiny built-in vocabulary: they load in a
fraction of the time a 152k vocabulary takes, and render the same text (the same BOS/EOS
strings and flags, checked; a template sees nothing else of the vocabulary). For each template
and conversation, replayer's offline render must equal the server's ``/apply-template`` byte
for byte (or both must refuse), and replayer's ids of that text the server's ``/tokenize``.

Used by ``tests/test_templates_conformance_live.py`` and by ``python -m
replayer.core.prompt.conformance BUILD...`` (prints the table docs/templates.md records).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from replayer.core.errors import ReplayerError, TemplateError


def conversations() -> dict[str, tuple[list[dict], list[dict] | None]]:
    """The three conversations of issue 26: a tool-calling agent with reasoning, non-ASCII text
    with nested tool arguments (floats, booleans, null), and a plain chat."""
    tools = [{"type": "function", "function": {
        "name": name, "description": f"{name} tool",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "number"}},
                       "required": ["path"]}}} for name in ("read_file", "run_command")]
    agent: list[dict] = [{"role": "system", "content": "You are a coding agent. Use the tools."}]
    for i in range(3):
        agent.append({"role": "user", "content": f"Step {i}: read src/server_{i}.py and run the tests."})
        agent.append({"role": "assistant", "content": "", "reasoning_content": f"I should read file {i} first.",
                      "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {
                          "name": "read_file", "arguments": f'{{"path": "src/server_{i}.py", "limit": 200}}'}}]})
        agent.append({"role": "tool", "tool_call_id": f"call_{i}", "name": "read_file",
                      "content": f"def main():\n    return {i}\n"})
        agent.append({"role": "assistant", "content": f"File {i} returns {i}.",
                      "reasoning_content": f"The file returns {i}."})
    agent.append({"role": "user", "content": "Now summarise what you found."})
    nested_args = ('{"path": "données/é.txt", "options": {"ratio": 2.0, "eps": 1e-07, "scale": 0.5, '
                   '"recursive": true, "follow": false, "owner": null, "tags": ["ü", 3, 1.25]}}')
    non_ascii: list[dict] = [
        {"role": "system", "content": "Réponds en français. 日本語も大丈夫です。"},
        {"role": "user", "content": "Lis «données/é.txt» — c'est urgent ✅"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_x", "type": "function", "function": {
            "name": "read_file", "arguments": nested_args}}]},
        {"role": "tool", "tool_call_id": "call_x", "name": "read_file", "content": "contenu: naïve café, Ωmega"},
        {"role": "assistant", "content": "Le fichier contient « naïve café ». 🎉"},
        {"role": "user", "content": "Merci ! Et ensuite ?"},
    ]
    plain: list[dict] = [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "Hello, who are you?"},
                         {"role": "assistant", "content": "I am an assistant."},
                         {"role": "user", "content": "What can you do?"}]
    return {"agent": (agent, tools), "non-ascii": (non_ascii, tools), "plain": (plain, None)}


@dataclass
class Outcome:
    template: str
    conversation: str
    result: str  # exact | both-refuse | text-differs | ids-differ | replayer-refuses | server-refuses
    detail: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    """A router-mode llama-server over presets (name → chat template file) of one GGUF."""

    def __init__(self, binary: Path, gguf: Path, template_files: dict[str, Path], work: Path,
                 models_max: int = 3, tokenizer_gguf: Path | None = None) -> None:
        lines = ["version = 1", "", "[*]", f"model = {gguf}", "c = 8192", "parallel = 1", "jinja = true",
                 "load-on-startup = false", ""]
        if tokenizer_gguf is not None:  # the vocabulary under test, for /tokenize only
            lines += [f"[{TOKENIZER}]", f"model = {tokenizer_gguf}", "load-on-startup = true", ""]
            models_max += 1
        for name, path in template_files.items():
            lines += [f"[{name}]", f"model = {gguf}", f"chat-template-file = {path}", ""]
        self.preset = work / "presets.ini"
        self.preset.write_text("\n".join(lines), encoding="utf-8")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(work / "router.log", "wb")
        from replayer.core import children

        self.proc = children.spawn_tied(
            [str(binary), "--models-preset", str(self.preset), "--models-max", str(models_max),
             "--host", "127.0.0.1", "--port", str(self.port), "-t", "1"],
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ))
        # no kept-alive connections: the router closes idle ones, and a request on a closed one is
        # "Server disconnected without sending a response"
        self.client = httpx.Client(timeout=120, limits=httpx.Limits(max_keepalive_connections=0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ReplayerError(f"router exited (see {work / 'router.log'})")
            try:
                if self.client.get(self.url + "/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise ReplayerError("router did not start")

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """The response; a "model limit reached" while the router swaps instances is retried
        (for up to a minute), an instance that "failed to load" is asked twice more (seen once in
        about 400 instance loads on the loaded 2-core machine, its log not kept; a template that
        really fails keeps failing), any other refusal is the answer."""
        deadline, reloads = time.monotonic() + 60, 2
        while True:
            r = self.client.post(self.url + path, json=body)
            if r.status_code == 200 or time.monotonic() > deadline:
                return r
            if "failed to load" in r.text and reloads:
                reloads -= 1
            elif "model limit reached" not in r.text:
                return r
            time.sleep(0.1)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def check(router: Router, name: str, source: str, tok: Any, build: int) -> list[Outcome]:
    """Every conversation of one template against the router's instance ``name``."""
    from replayer.core.prompt import templates
    from replayer.core.prompt.templates import Template

    bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
    eos = tok.tokens[tok.eos_id] if tok.eos_id is not None else ""
    tpl = Template(name=name, source=source, bos_token=bos, eos_token=eos, add_bos=tok.add_bos)
    out: list[Outcome] = []
    for conv, (messages, tools) in conversations().items():
        body: dict[str, Any] = {"model": name, "messages": messages}
        if tools:
            body["tools"] = tools
        r = router.post("/apply-template", body)
        server_text = r.json().get("prompt") if r.status_code == 200 else None
        server_err = None if server_text is not None else _error_text(r)
        try:
            mine = templates.render(tpl, messages, tools, build_number=build)
            mine_err = None
        except TemplateError as exc:
            mine, mine_err = None, str(exc)
        if server_text is None and mine is None:
            out.append(Outcome(name, conv, "both-refuse",
                               f"server: {one_line(server_err)[-160:]} | replayer: {one_line(mine_err)[-160:]}"))
        elif server_text is None:
            out.append(Outcome(name, conv, "server-refuses", one_line(server_err)[-240:]))
        elif mine is None:
            out.append(Outcome(name, conv, "replayer-refuses", one_line(mine_err)[-240:]))
        elif mine != server_text:
            out.append(Outcome(name, conv, "text-differs", _first_difference(mine, server_text)))
        else:
            ids = router.post("/tokenize", {"model": TOKENIZER, "content": server_text, "add_special": True,
                                            "parse_special": True}).json()["tokens"]
            mine_ids = tok.encode(mine, add_special=True)
            out.append(Outcome(name, conv, "exact" if ids == mine_ids else "ids-differ",
                               "" if ids == mine_ids else f"{len(mine_ids)} vs {len(ids)} tokens"))
    return out


def _error_text(r: httpx.Response) -> str:
    try:
        err = r.json().get("error", {})
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    except ValueError:
        return r.text[:200]


def _first_difference(a: str, b: str) -> str:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at {n}: replayer {a[max(0, n - 30):n + 50]!r} | server {b[max(0, n - 30):n + 50]!r}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def template_files(models_dir: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted((models_dir / "templates").glob("*.jinja"))}


def run(build: int, binary: Path, work: Path, only: list[str] | None = None, vocab: str = "qwen2",
        pre: str | None = None, specials: tuple[str, ...] = ()) -> list[Outcome]:
    """Every template of ``build``'s sdist (or ``only`` those), on one router of ``binary``; the
    tiny GGUF carries the sdist's ``ggml-vocab-{vocab}.gguf`` (``pre``, ``specials``: see
    ``make_tiny``)."""
    from replayer.core.builds import manager
    from replayer.core.prompt.gguf_tokenizer import GGUFTokenizer
    from replayer.core.tiny_models import make_tiny

    models = manager.sdist_models_dir(build)
    files = template_files(models)
    if only:
        files = {k: v for k, v in files.items() if k in only}
    vocab_gguf = make_tiny("llama", work / f"tiny-{vocab}-{pre or 'own'}.gguf",
                           vocab=str(models / f"ggml-vocab-{vocab}.gguf"), pre=pre, specials=specials)
    tok = GGUFTokenizer(vocab_gguf)
    text_gguf = make_tiny("llama", work / "tiny-text.gguf")
    _same_template_inputs(text_gguf, tok)
    router = Router(binary, text_gguf, files, work, models_max=WORKERS + 1, tokenizer_gguf=vocab_gguf)
    try:
        # templates checked WORKERS at a time: one's instance loads while another's renders
        # (replayer's renders still take turns in the one sandbox worker); the router keeps one
        # instance more than there are workers, so none is unloaded while a worker still uses it
        with ThreadPoolExecutor(WORKERS) as pool:
            rows = pool.map(lambda item: _check_one(router, item[0], item[1], tok, build), files.items())
            return [o for row in rows for o in row]
    finally:
        router.stop()


#: templates checked at once (measured on 2 cores: docs/benchmarks.md)
WORKERS = 2
#: the router's preset that tokenizes (a name no sdist template has)
TOKENIZER = "vocabulary-under-test"


def _same_template_inputs(text_gguf: Path, tok: Any) -> None:
    """What a template reads of its GGUF (BOS and EOS text, the add-BOS/EOS flags) is the same
    in the tiny vocabulary the template instances load as in the vocabulary under test."""
    from replayer.core.prompt.gguf_tokenizer import GGUFTokenizer

    small = GGUFTokenizer(text_gguf)
    ours = [small.tokens[i] if i is not None else None for i in (small.bos_id, small.eos_id)]
    theirs = [tok.tokens[i] if i is not None else None for i in (tok.bos_id, tok.eos_id)]
    if ours + [small.add_bos] != theirs + [tok.add_bos]:
        raise ReplayerError(f"the template instances' GGUF has BOS/EOS {ours} (add_bos {small.add_bos}), "
                            f"the vocabulary's {theirs} (add_bos {tok.add_bos}): their renders would differ")


def _check_one(router: Router, name: str, path: Path, tok: Any, build: int) -> list[Outcome]:
    try:
        return check(router, name, path.read_text(encoding="utf-8"), tok, build)
    except httpx.HTTPError as exc:  # an instance that died: that template's row says so
        return [Outcome(name, "*", "server-error", f"{type(exc).__name__}: {exc}")]
