"""Chat templates: untrusted Jinja rendered in a sandbox, and the delimiters the server derives.

Templates come from a model's GGUF, from the bundled set (written for this project), from
a file, or from a running server. They are rendered with
``jinja2.sandbox.ImmutableSandboxedEnvironment`` plus the helpers llama.cpp's templates
expect; any escape attempt or ``raise_exception`` surfaces as a one-line ``TemplateError``.

Delimiters follow ``spec/llama-server-prefill.md`` §8.3: specialised handlers recognised
from the template text, else the generic auto-parser's user/assistant markers, found the
way the server finds them — by rendering with and without a message and diffing.

The Jinja environments and their helpers live in ``jinja_env``, the server's capability probe
in ``template_probe`` (``caps_of`` is re-exported here for callers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SecurityError

from replayer.core.builds.catalog import Build
from replayer.core.errors import ReplayerError, TemplateError, did_you_mean
from replayer.core.prompt import handlers, output_pieces, reasoning_analysis, sandbox
from replayer.core.prompt.jinja_env import RaiseException, trusted_environment
from replayer.core.prompt.template_inputs import Caps, TemplateInputs
from replayer.core.prompt.template_probe import caps_of
from replayer.core.textfile import read_text

__all__ = ["BOS", "BUNDLED", "DEFAULT_TEMPLATE", "Delimiter", "Template", "bundled", "caps_of", "delimiters_for",
           "detect_family", "from_file", "generic_markers", "reasoning_markers", "render", "resolve",
           "template_caps", "thinking_default"]

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
    add_bos: bool = False  # the vocabulary adds BOS itself: the server strips a rendered one
    add_eos: bool = False

    @property
    def family(self) -> str:
        return detect_family(self.source)


@lru_cache(maxsize=64)
def _compile(source: str, trusted: bool = False) -> jinja2.Template | sandbox.BoundedTemplate:
    """A trusted template renders here; an untrusted one is checked here and renders in the
    sandbox's worker, on the render budget."""
    try:
        if not trusted:  # compiled in the worker, inside the render budget (a 700 KB template
            # took 29 s to compile here, outside it); its syntax errors come back from there
            return sandbox.BoundedTemplate(sandbox.checked_source(source))
        tpl = output_pieces.compile_in_pieces(trusted_environment(), source)  # ours: outputs in pieces
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from None
    return tpl


def template_caps(template: Template) -> Caps:
    if template.trusted:
        return caps_of(template.source)
    return _untrusted_caps(template.source)


@lru_cache(maxsize=64)
def _untrusted_caps(source: str) -> Caps:
    return Caps(**sandbox.bounded_caps(source))


# -- rendering ------------------------------------------------------------------------------

def _run(tpl: jinja2.Template, ctx: dict[str, Any]) -> str:
    return "".join(_chunks(tpl, ctx))


def _chunks(tpl: jinja2.Template, ctx: dict[str, Any]) -> Iterator[str]:
    """The rendered prompt in the template's own chunks (``generate``: what ``render`` joins; a
    sandboxed template's in one piece); every failure a ``TemplateError``."""
    try:
        if isinstance(tpl, jinja2.Template):
            yield from tpl.generate(**ctx)
        else:
            yield tpl.render(**ctx)
    except RaiseException as exc:
        raise TemplateError(f"chat template refused the conversation: {exc}") from None
    except SecurityError as exc:
        raise TemplateError(f"chat template tried to leave the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError, ArithmeticError) as exc:
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from None


def _suffix_after_common_prefix(a: list[str], chunks: Iterable[str]) -> str:
    """``_common_suffix_after_prefix("".join(a), "".join(chunks))`` joining neither: a continued
    assistant message's second render is compared chunk by chunk as it comes against the first
    render's chunks, so only its generation prompt is kept, not a second copy of the whole prompt
    (nor the first render joined beside its chunks: 4 bytes a character when one is an emoji)."""
    i = j = 0  # the next character of "".join(a): a[i][j]
    tail: list[str] = []
    for c in chunks:
        if tail:
            tail.append(c)
            continue
        k = 0  # characters of c matched so far
        while k < len(c):
            if i == len(a):
                tail.append(c[k:])
                break
            piece = a[i]
            m = min(len(piece) - j, len(c) - k)
            if not piece.startswith(c[k:k + m], j):
                d = 0
                while piece[j + d] == c[k + d]:
                    d += 1
                tail.append(c[k + d:])
                break
            k, j = k + m, j + m
            if j == len(piece):
                i, j = i + 1, 0
    return "".join(tail)


def _common_suffix_after_prefix(a: str, b: str) -> str:
    """``b`` after the longest common prefix of ``a`` and ``b`` (the server's generation prompt)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return b[n:]


def reasoning_markers(template: Template) -> tuple[str, str]:
    """The reasoning start/end the server's autoparser derives (``analyze_reasoning``, the
    tag-wrapped case): what the template writes around an assistant's reasoning."""
    return _reasoning_markers(template.source, template.trusted)


@lru_cache(maxsize=64)
def _reasoning_markers(source: str, trusted: bool) -> tuple[str, str]:
    tpl = _compile(source, trusted)
    r, c = "\x02THINKING\x02", "\x02CONTENT\x02"
    base = [{"role": "user", "content": "Hello"}]
    try:
        plain = tpl.render(messages=base + [{"role": "assistant", "content": c}], bos_token="", eos_token="")
        think = tpl.render(messages=base + [{"role": "assistant", "content": c, "reasoning_content": r}],
                           bos_token="", eos_token="")
    except Exception:
        return "", ""
    p = len(think) - len(_common_suffix_after_prefix(plain, think))
    q = p + len(_common_suffix_after_prefix(plain[p:][::-1], think[p:][::-1]))
    inserted = think[p:q]
    if r not in inserted:
        return "", ""
    start, end = inserted.split(r, 1)
    if c in end:
        end = end[:end.index(c)]
    return (start, end) if start.strip() and end.strip() else ("", end if end.strip() else "")


#: from this build the server sets the ``preserve_reasoning`` template kwarg to true unless told
#: otherwise (common/arg.cpp:964-966 of b11434, :969-971 of b10865; b10001 has no default) and,
#: for a boolean ``preserve_reasoning``, the variables templates read to keep past reasoning
#: (``caps_apply_preserve_reasoning``, common/jinja/caps.cpp:22-27; chat.cpp:940-943 of b11434).
#: 10865 is the earliest sdist read with it, not necessarily the first build that had it.
PRESERVE_REASONING_FROM = 10865
PRESERVE_REASONING = {"preserve_reasoning": True, "preserve_thinking": True, "clear_thinking": False,
                      "truncate_history_thinking": False, "drop_thinking": False}


def thinking_default(template: Template, build_number: int | None = None) -> bool:
    """``enable_thinking`` as the server passes it by default: true only when the template
    supports thinking (its specialised handler says so, or the auto-parser's reasoning analysis
    finds a reasoning mode; ``reasoning_analysis``). replayer's own templates do not read it."""
    if template.trusted:
        return True
    found = reasoning_analysis.handler_thinking(template.source, build_number)
    if found is not None:
        return found
    return _analyzed_thinking(template.source, template.bos_token, template.eos_token)


@lru_cache(maxsize=64)
def _analyzed_thinking(source: str, bos_token: str, eos_token: str) -> bool:
    return sandbox.bounded_thinking(source, bos_token, eos_token, _untrusted_caps(source).tool_calls)


def render(template: Template, messages: list[dict], tools: list[dict] | None = None,
           add_generation_prompt: bool = True, *, build_number: int | None = None,
           now: datetime | None = None, allow_media: bool = True, **kwargs: Any) -> str:
    """The prompt llama-server renders for this request body (``/apply-template``): the
    chunks of ``render_chunks`` joined."""
    return "".join(render_chunks(template, messages, tools, add_generation_prompt, build_number=build_number,
                                 now=now, allow_media=allow_media, **kwargs))


def render_chunks(template: Template, messages: list[dict], tools: list[dict] | None = None,
                  add_generation_prompt: bool = True, *, build_number: int | None = None,
                  now: datetime | None = None, allow_media: bool = True, **kwargs: Any) -> list[str]:
    """The prompt llama-server renders for this request body (``/apply-template``), in the
    template's own chunks, not joined: the estimate's layout reads them as they are (``ChunkedText``),
    since one character past U+FFFF makes a joined prompt 4 bytes a character (issue 24).

    Messages go through the server's own preparation first (``prepare``): arguments parsed
    into objects when the template reads them as objects, typed content joined, a trailing
    assistant message continued. ``allow_media``: the server has a multimodal projector (a
    text-only server refuses image parts). Every failure is a ``TemplateError`` with the reason.
    """
    from replayer.core.prompt.template_inputs import extra_context, template_inputs

    tpl = _compile(template.source, template.trusted)
    prep = template_inputs(template.source, template_caps(template), messages, tools,
                           add_generation_prompt=add_generation_prompt, build_number=build_number,
                           allow_media=allow_media)
    if not template.trusted and handlers.is_ministral_3(template.source):
        prep.messages = handlers.ministral_3_messages(prep.messages)
    elif not template.trusted and handlers.is_outdated_gemma4(template.source):
        prep.messages = handlers.gemma4_tool_responses(prep.messages)
    elif not template.trusted and handlers.is_lfm2(template.source):
        prep.messages = handlers.lfm2_messages(prep.messages)
    ctx: dict[str, Any] = dict(messages=prep.messages, bos_token=template.bos_token, eos_token=template.eos_token,
                               enable_thinking=thinking_default(template, build_number))
    if prep.tools:
        ctx["tools"] = prep.tools
    ctx.update(extra_context(now))
    if build_number is not None and build_number >= PRESERVE_REASONING_FROM:
        ctx.update(PRESERVE_REASONING)
    ctx.update(kwargs)
    gen = add_generation_prompt and prep.continuation is None
    if gen:
        ctx["add_generation_prompt"] = True
    # the chunks are joined once, at the end: a continued message's tail or a stripped BOS
    # made a second whole copy of the prompt beside the first (issue 24)
    chunks = list(_chunks(tpl, ctx))
    if prep.continuation is not None:
        chunks = _continued(chunks, tpl, ctx, template, prep)
    bos, eos = template.bos_token, template.eos_token
    if template.add_bos and bos and _ends(chunks, len(bos), head=True) == bos:
        _drop(chunks, len(bos), head=True)
    if template.add_eos and eos and _ends(chunks, len(eos), head=False) == eos:
        _drop(chunks, len(eos), head=False)
    return chunks


def _continued(chunks: list[str], tpl: jinja2.Template, ctx: dict[str, Any], template: Template,
               prep: TemplateInputs) -> list[str]:
    """The chunks of a prompt that continues its trailing assistant message (``prefill_assistant``):
    the rendered conversation, then the server's generation prompt and what the message holds."""
    from replayer.core.prompt.template_inputs import render_content

    gpt_oss = "<|channel|>" in template.source
    if gpt_oss:
        prompt = "".join(chunks)
        if (i := prompt.rfind("<|return|>")) >= 0:  # is_inference without a generation prompt
            prompt = prompt[:i] + "<|end|>" + prompt[i + len("<|return|>"):]
            chunks = [prompt]
        del prompt
    cont = prep.continuation
    if gpt_oss:
        tail = "<|start|>assistant<|channel|>analysis<|message|>" + cont["reasoning_content"]
        if not prep.continue_reasoning_only:
            tail += "<|end|><|start|>assistant<|channel|>final<|message|>" + render_content(cont)
    else:
        tail = _suffix_after_common_prefix(chunks, _chunks(tpl, dict(ctx, add_generation_prompt=True)))
        start, end = reasoning_markers(template)
        if start:
            i = tail.find(start)
            tail = (tail if i < 0 else tail[:i]) + start + cont["reasoning_content"]
            if not prep.continue_reasoning_only:
                tail += end
        if not prep.continue_reasoning_only:
            tail += render_content(cont)
    chunks.append(tail)
    return chunks


def _ends(chunks: list[str], n: int, *, head: bool) -> str:
    """The first (``head``) or last ``n`` characters of ``"".join(chunks)``, without joining."""
    out: list[str] = []
    k = 0
    for c in (chunks if head else reversed(chunks)):
        if k >= n:
            break
        piece = c[:n - k] if head else c[max(0, len(c) - (n - k)):]
        out.append(piece)
        k += len(piece)
    return "".join(out if head else reversed(out))


def _drop(chunks: list[str], n: int, *, head: bool) -> None:
    """Drop the first (``head``) or last ``n`` characters of the chunks' concatenation, in place."""
    order = range(len(chunks)) if head else range(len(chunks) - 1, -1, -1)
    for i in order:
        if n <= 0:
            return
        c = chunks[i]
        if len(c) <= n:
            chunks[i], n = "", n - len(c)
        else:
            chunks[i], n = (c[n:] if head else c[:len(c) - n]), 0


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
