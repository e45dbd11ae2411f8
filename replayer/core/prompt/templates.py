"""Chat templates: untrusted Jinja rendered in a sandbox, and the delimiters the server derives.

Templates come from a model's GGUF, from the bundled set (written for this project), from
a file, or from a running server. They are rendered with
``jinja2.sandbox.ImmutableSandboxedEnvironment`` plus the helpers llama.cpp's templates
expect; any escape attempt or ``raise_exception`` surfaces as a one-line ``TemplateError``.

Delimiters follow ``spec/llama-server-prefill.md`` §8.3: specialised handlers recognised
from the template text, else the generic auto-parser's user/assistant markers, found the
way the server finds them — by rendering with and without a message and diffing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import orjson
from jinja2.sandbox import SecurityError

from replayer.core.builds.catalog import Build
from replayer.core.errors import ReplayerError, TemplateError, did_you_mean
from replayer.core.prompt import sandbox
from replayer.core.textfile import read_text

BUNDLED = {
    "chatml": "chatml-tools.jinja",  # ChatML / Qwen2.5 layout with tools
    "qwen3-coder": "qwen3-coder.jinja",  # Qwen3-Coder / Qwen3.5 / Qwen3.6 XML tool calls
    "llama3": "llama3.jinja",
    "gpt-oss": "gpt-oss.jinja",
    "gemma": "gemma.jinja",
}
DEFAULT_TEMPLATE = "chatml"

#: bos_token per bundled family (for rendering and for the estimate's BOS count)
BOS = {"llama3": "<|begin_of_text|>", "gemma": "<bos>"}


@dataclass(frozen=True)
class Delimiter:
    role: str  # user | assistant | system | tool
    text: str


@dataclass(frozen=True)
class Template:
    name: str  # bundled name, file path, "gguf:<path>" or "server"
    source: str
    bos_token: str = ""
    eos_token: str = ""
    trusted: bool = False  # only replayer's own bundled templates skip the sandbox

    @property
    def family(self) -> str:
        return detect_family(self.source)


class _RaiseException(Exception):
    pass


def _raise_exception(message: str = "template error") -> None:
    raise _RaiseException(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    """Like Python's ``json.dumps`` with the separators HF templates expect."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


def _fromjson(value: str) -> Any:
    try:
        return orjson.loads(value)
    except (TypeError, ValueError):
        pass
    try:  # what orjson refuses and Python's json takes (NaN, huge integers)
        return json.loads(value)
    except (TypeError, ValueError):
        return {}


def _text(value: Any) -> str:
    """``{{ a }}{{ b|text }}`` renders what ``{{ a + b }}`` does without building ``a + b``
    (a copy of every message until the prompt is joined): the bundled templates use it. Like
    ``+``, it refuses what is not a string, so the message-shape retries still happen."""
    if isinstance(value, str):
        return value
    raise TypeError(f"can only concatenate str (not {type(value).__name__!r}) to str")


def _with_helpers(env: jinja2.Environment) -> jinja2.Environment:
    env.filters["text"] = _text
    env.filters["tojson"] = _tojson
    env.filters["fromjson"] = _fromjson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV_ARGS = dict(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined,
                 extensions=["jinja2.ext.loopcontrols"], autoescape=False)


@lru_cache(maxsize=1)
def _environment() -> sandbox.BoundedSandbox:
    return _with_helpers(sandbox.BoundedSandbox(**_ENV_ARGS))


@lru_cache(maxsize=1)
def _trusted_environment() -> jinja2.Environment:
    """For the bundled templates only (written by this project): same helpers, no sandbox cost.
    Message data cannot run code in Jinja; only template source can, and that is ours here."""
    return _with_helpers(jinja2.Environment(**_ENV_ARGS))


@lru_cache(maxsize=64)
def _compile(source: str, trusted: bool = False) -> jinja2.Template | sandbox.BoundedTemplate:
    """A trusted template renders here; an untrusted one is checked here and renders in the
    sandbox's worker, on the render budget."""
    try:
        tpl = (_trusted_environment() if trusted else _environment()).from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from None
    return tpl if trusted else sandbox.BoundedTemplate(source)


def flatten_content(messages: list[dict]) -> list[dict]:
    """Typed content parts → one string, text parts joined by newlines, as llama-server does
    for templates that take plain string content."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            m = dict(m)
            m["content"] = "\n".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
        elif c is None and m.get("role") != "assistant":
            m = dict(m, content="")
        out.append(m)
    return out


def _variants(flat: list[dict]):
    yield flat
    has_null = any(m.get("content") is None for m in flat)
    non_null = [dict(m, content="") if m.get("content") is None else m for m in flat] if has_null else flat
    if has_null:
        yield non_null
    if any(m.get("tool_calls") for m in flat):
        def objects(msgs):
            out = []
            for m in msgs:
                if m.get("tool_calls"):
                    calls = []
                    for tc in m["tool_calls"]:
                        fn = dict(tc.get("function") or {})
                        if isinstance(fn.get("arguments"), str):
                            fn["arguments"] = _fromjson(fn["arguments"])
                        calls.append(dict(tc, function=fn))
                    m = dict(m, tool_calls=calls)
                out.append(m)
            return out
        yield objects(flat)
        if has_null:
            yield objects(non_null)


def _polyfilled(flat: list[dict]) -> list[dict]:
    """For templates that refuse system/tool roles: what llama.cpp's polyfills send instead —
    system text folded into the first user turn, tool calls and results as plain turns,
    consecutive same-role turns merged so roles alternate."""
    out: list[dict] = []
    system = ""
    for m in flat:
        role, content = m.get("role"), m.get("content") or ""
        if role in ("system", "developer"):
            system += content + "\n\n"
            continue
        if role == "tool":
            role, content = "user", json.dumps({"tool_response": {"tool": m.get("name") or "tool", "content": content}})
        elif role == "assistant" and m.get("tool_calls"):
            calls = [{"name": (tc.get("function") or {}).get("name"),
                      "arguments": (tc.get("function") or {}).get("arguments")} for tc in m["tool_calls"]]
            content = (content + "\n" if content else "") + json.dumps({"tool_calls": calls})
        if role == "user" and system:
            content, system = system + content, ""
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "content": out[-1]["content"] + "\n\n" + content}
        else:
            out.append({"role": role, "content": content})
    return out


def render(template: Template, messages: list[dict], tools: list[dict] | None = None,
           add_generation_prompt: bool = True, **kwargs: Any) -> str:
    """Render in the sandbox; every failure is a ``TemplateError`` with the reason."""
    tpl = _compile(template.source, template.trusted)
    flat = flatten_content(messages)
    ctx = dict(messages=flat, tools=tools or None, add_generation_prompt=add_generation_prompt,
               bos_token=template.bos_token, eos_token=template.eos_token)
    ctx.update(kwargs)
    try:
        last: Exception | None = None
        # llama.cpp probes template capabilities (requires_non_null_content,
        # requires_object_arguments) and adapts the messages; try the same variants in turn
        for variant in _variants(flat):
            ctx["messages"] = variant
            try:
                return tpl.render(**ctx)
            except (TypeError, jinja2.UndefinedError) as exc:
                last = exc
            except _RaiseException as exc:
                last = exc
                break
        if last is not None:
            ctx["messages"] = _polyfilled(flat)
            try:
                return tpl.render(**ctx)
            except (_RaiseException, TypeError, jinja2.UndefinedError):
                pass
        assert last is not None
        raise last
    except _RaiseException as exc:
        raise TemplateError(f"chat template refused the conversation: {exc}") from None
    except SecurityError as exc:
        raise TemplateError(f"chat template tried to leave the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError, ArithmeticError) as exc:
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from None


def bundled(name: str) -> Template:
    if name not in BUNDLED:
        hint = did_you_mean(name, list(BUNDLED))
        raise ReplayerError(f"unknown template {name!r}; bundled: {', '.join(BUNDLED)}",
                            hint=f"did you mean {hint}?" if hint else None)
    src = resources.files("replayer.data.templates").joinpath(BUNDLED[name]).read_text(encoding="utf-8")
    return Template(name=name, source=src, bos_token=BOS.get(name, ""), trusted=True)


def from_file(path: str | Path, bos_token: str = "", eos_token: str = "") -> Template:
    p = Path(path).expanduser()
    return Template(name=str(p), source=read_text(p, "template"), bos_token=bos_token, eos_token=eos_token)


def resolve(spec: str | None) -> Template:
    """A bundled name, a ``.jinja`` path, or None for the default."""
    if spec is None:
        return bundled(DEFAULT_TEMPLATE)
    if spec in BUNDLED:
        return bundled(spec)
    if spec.endswith(".jinja") or "/" in spec or Path(spec).exists():
        return from_file(spec)
    return bundled(spec)  # raises with a suggestion


# -- families and delimiters -------------------------------------------------------------

def detect_family(source: str) -> str:
    """The server's specialised-handler checks, on template text (first match wins)."""
    if "<|start|>" in source and "<|channel|>" in source:
        return "gpt-oss"
    if "<|turn>" in source:
        return "gemma4"
    if "<tool_call>" in source and "<function=" in source and "<parameter=" in source:
        return "qwen3-coder"
    if "<|start_header_id|>" in source:
        return "llama3"
    if "<start_of_turn>" in source:
        return "gemma"
    if "<|im_start|>" in source:
        return "chatml"
    return "generic"


def delimiters_for(template: Template, build: Build) -> list[Delimiter]:
    """The delimiter list the server of ``build`` would derive from this template."""
    fam = template.family
    if fam == "gpt-oss":
        return [Delimiter("assistant", "<|start|>assistant"), Delimiter("user", "<|start|>user"),
                Delimiter("system", "<|start|>developer"), Delimiter("system", "<|start|>system"),
                Delimiter("tool", "<|start|>functions")]
    if fam == "gemma4":
        user = "<|turn>user" if build.token_space_spans else "<|turn>user\n"
        return [Delimiter("user", user), Delimiter("assistant", "<|turn>model")]
    if fam == "qwen3-coder" and build.tool_delimiters_for_qwen3_coder:
        return [Delimiter("assistant", "<|im_start|>assistant"),
                Delimiter("tool", "<|im_start|>user\n<tool_response>"),
                Delimiter("tool", "<|im_start|>tool_response"),
                Delimiter("user", "<|im_start|>user"), Delimiter("system", "<|im_start|>system")]
    if fam == "llama3":
        return [Delimiter("assistant", "<|start_header_id|>assistant<|end_header_id|>"),
                Delimiter("user", "<|start_header_id|>user<|end_header_id|>")]
    return generic_markers(template)


def generic_markers(template: Template) -> list[Delimiter]:
    """The auto-parser's markers: what a template emits before a user turn / a reply."""
    u1, a1, u2 = "\x02USER-ONE\x02", "\x02ASSISTANT-ONE\x02", "\x02USER-TWO\x02"
    base = [{"role": "user", "content": u1}]
    try:
        gen = render(template, base, add_generation_prompt=True)
        nogen = render(template, base, add_generation_prompt=False)
        two = render(template, base + [{"role": "assistant", "content": a1}, {"role": "user", "content": u2}],
                     add_generation_prompt=False)
        one = render(template, base + [{"role": "assistant", "content": a1}], add_generation_prompt=False)
    except sandbox.TemplateBudgetError:
        raise
    except TemplateError:
        return []
    out: list[Delimiter] = []
    assistant = gen[len(nogen):].strip() if gen.startswith(nogen) else ""
    if a1 in one and u2 in two:
        after_a = one[one.index(a1) + len(a1):]  # the assistant turn's end marker
        between = two[two.index(a1) + len(a1): two.index(u2)]
        between = between.removeprefix(after_a)
        user = between.strip()
        if user:
            out.append(Delimiter("assistant", assistant)) if assistant else None
            out.append(Delimiter("user", user))
            return out
    if assistant:
        out.append(Delimiter("assistant", assistant))
    return out
