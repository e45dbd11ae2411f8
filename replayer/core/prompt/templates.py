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
from json.encoder import encode_basestring as _encode_str
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from replayer.core.builds.catalog import Build
from replayer.core.errors import ReplayerError, TemplateError, did_you_mean
from replayer.core.prompt import handlers, jinja_values, output_pieces, sandbox
from replayer.core.prompt.prepare import Caps
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
    add_bos: bool = False  # the vocabulary adds BOS itself: the server strips a rendered one
    add_eos: bool = False

    @property
    def family(self) -> str:
        return detect_family(self.source)


_RaiseException = sandbox.RaiseException  # raised by a template's raise_exception(), in or out of the worker


def _raise_exception(message: str = "template error") -> None:
    raise _RaiseException(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _json(value: Any, lvl: int, indent: int, item_sep: str, key_sep: str, out: list[str]) -> None:
    """``jinja::value_to_json``: Python's JSON but for numbers, printed as C++ streams do
    (a float with 6 significant digits, ``%g``)."""
    if value is None or isinstance(value, jinja2.Undefined):
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(jinja_values.json_float(value))
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, (list, tuple, dict)) or _is_iterator(value):
        is_dict = isinstance(value, dict)
        items = list(value.items()) if is_dict else list(value)
        out.append("{" if is_dict else "[")
        if items:
            nl = "\n" if indent >= 0 else ""
            pad = " " * (indent * (lvl + 1)) if indent > 0 else ""
            out.append(nl)
            for i, item in enumerate(items):
                out.append(pad)
                if is_dict:
                    out.append(_encode_str(str(item[0])))
                    out.append(key_sep)
                    _json(item[1], lvl + 1, indent, item_sep, key_sep, out)
                else:
                    _json(item, lvl + 1, indent, item_sep, key_sep, out)
                if i < len(items) - 1:
                    out.append(item_sep)
                out.append(nl)
            out.append(" " * (indent * lvl) if indent > 0 else "")
        out.append("}" if is_dict else "]")
    else:
        out.append("null")


def _is_iterator(value: Any) -> bool:
    """Jinja2's ``map``/``select`` filters return generators where the server's return arrays
    (value.cpp:1061): ``tools|map(attribute='function')|tojson`` is a JSON array on both."""
    import types

    return isinstance(value, types.GeneratorType)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False, **_: Any) -> str:
    """The server's ``tojson`` filter (``common/jinja/value.cpp``: ``tojson``)."""
    ind = indent if isinstance(indent, int) and not isinstance(indent, bool) else -1
    seps = list(separators) if isinstance(separators, (list, tuple)) else []
    item_sep = seps[0] if seps else (", " if ind < 0 else ",")
    key_sep = seps[1] if len(seps) > 1 else ": "
    if sort_keys:
        raise _RaiseException("tojson sort_keys=true not implemented")
    out: list[str] = []
    _json(value, 0, ind, item_sep, key_sep, out)
    text = "".join(out)
    if ensure_ascii:  # json_ensure_ascii_preserving_format: non-ASCII inside strings as \\uXXXX
        text = "".join(ch if ord(ch) < 128 else json.dumps(ch)[1:-1] for ch in text)
    return text


def _fromjson(value: str) -> Any:
    try:
        return orjson.loads(value)
    except (TypeError, ValueError):
        pass
    try:  # what orjson refuses and Python's json takes (NaN, huge integers)
        return json.loads(value)
    except (TypeError, ValueError):
        return {}


def _with_helpers(env: jinja2.Environment) -> jinja2.Environment:
    env.filters["tojson"] = _tojson
    env.filters["string"] = jinja_values.string_filter
    env.filters["safe"] = jinja_values.safe_filter
    env.filters["fromjson"] = _fromjson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV_ARGS = dict(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined,
                 extensions=["jinja2.ext.loopcontrols", jinja_values.GenerationTag], autoescape=False)
#: templates from GGUFs, files and servers: ``{{ }}`` printed as llama.cpp's engine prints it
#: (the bundled ones are written for this project and keep Jinja2's printing)
_SANDBOX_ARGS = dict(_ENV_ARGS, finalize=jinja_values.output)


@lru_cache(maxsize=1)
def _environment() -> sandbox.BoundedSandbox:
    return _with_helpers(sandbox.BoundedSandbox(**_SANDBOX_ARGS))


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
        if not trusted:  # compiled in the worker, inside the render budget (a 700 KB template
            # took 29 s to compile here, outside it); its syntax errors come back from there
            return sandbox.BoundedTemplate(sandbox.checked_source(source))
        tpl = output_pieces.compile_in_pieces(_trusted_environment(), source)  # ours: outputs in pieces
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from None
    return tpl


# -- template capabilities, probed as the server probes them ---------------------------------

class _Seen:
    """What a probe value records: read at all (``used``) and how (``ops``), as the server's
    Jinja runtime does in ``jinja::caps_get``."""

    def _see(self, op: str | None = None) -> None:
        self.used = True
        if op:
            self.ops.add(op)


class _PStr(str, _Seen):
    def __iter__(self):  # the server's runtime cannot loop over a string: it notes the try, then fails
        self._see("array_access")
        raise TypeError("a string is not iterable")


class _PDict(dict, _Seen):
    def __iter__(self):
        self._see("object_access")
        return super().__iter__()

    def items(self):  # type: ignore[override]
        # a loop over items() binds each value to a name; the server marks a value read when
        # its name is looked up, which Python's Jinja does not report: count the loop as the read
        self._see("object_access")
        for v in dict.values(self):
            if isinstance(v, _Seen):
                v.used = True
        return super().items()

    def get(self, key, default=None):  # type: ignore[override]
        # ``message.get('content')`` reads the value as ``message.content`` does (the server's
        # ``get`` returns ``obj->at(key)``, value.cpp:1211): Reka-Edge reads its system turn so
        self._see("object_access")
        value = super().get(key, default)
        if isinstance(value, _Seen):
            value.used = True
        return value


class _PList(list, _Seen):
    def __iter__(self):
        self._see("array_access")
        return super().__iter__()


def _tracked(value: Any) -> Any:
    if isinstance(value, dict):
        out: Any = _PDict({k: _tracked(v) for k, v in value.items()})
    elif isinstance(value, list):
        out = _PList(_tracked(v) for v in value)
    elif isinstance(value, str):
        out = _PStr(value)
    else:
        return value
    out.used, out.ops = False, set()
    return out


def _see_deep(value: Any) -> None:
    if isinstance(value, _Seen):
        value.used = True
    if isinstance(value, dict):
        for v in dict.values(value):
            _see_deep(v)
    elif isinstance(value, list):
        for v in list.__iter__(value):
            _see_deep(v)


class _ProbeEnvironment(sandbox.BoundedSandbox):
    """Member and index access mark the value read and the container accessed."""

    def _seen(self, obj: Any, key: Any, value: Any) -> Any:
        if isinstance(value, _Seen):
            value.used = True
        if isinstance(obj, _Seen) and not isinstance(value, jinja2.Undefined):
            obj._see("array_access" if isinstance(key, int) else "object_access")
        return value

    def getattr(self, obj: Any, attribute: str) -> Any:
        return self._seen(obj, attribute, super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        return self._seen(obj, argument, super().getitem(obj, argument))


def _probe_filter(name: str, fn: Any) -> Any:
    """A filter that marks its input as the server's builtins do (``tojson``/``string`` deeply)."""
    import functools

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        for a in args[:2]:
            if isinstance(a, _Seen):
                a._see(name)
                if name in ("tojson", "string"):
                    _see_deep(a)
                break
        return fn(*args, **kwargs)

    return wrapped


@lru_cache(maxsize=1)
def _probe_environment() -> ImmutableSandboxedEnvironment:
    env = _with_helpers(_ProbeEnvironment(**_SANDBOX_ARGS))
    env.filters = {k: _probe_filter(k, f) for k, f in env.filters.items()}
    return env


_PROBE_TOOLS = [{"name": "tool", "type": "function", "function": {
    "name": "tool1", "description": "Tool description", "parameters": {
        "type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
        "required": ["arg"]}}}]


def _probe_calls(arguments: Any) -> list[dict]:
    return [{"role": "user", "content": "User message"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call00001", "type": "function", "function": {"name": "tool1", "arguments": arguments}}]},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool response was 'tool response'"},
            {"role": "user", "content": "User message"}]


def _probe(source: str, messages: list[dict], tools: list[dict] | None = None) -> tuple[bool, Any, Any]:
    msgs, tl = _tracked(messages), _tracked(tools or [])
    try:
        _probe_environment().from_string(source).render(messages=msgs, tools=tl, bos_token="", eos_token="",
                                                         add_generation_prompt=True)
        ok = True
    except Exception:  # any failure only says "cannot tell", as in caps_try_execute
        ok = False
    return ok, msgs, tl


@lru_cache(maxsize=64)
def caps_of(source: str) -> Caps:
    """``jinja::caps_get``: run the template on the server's probe conversations and see
    which values it reads (typed content, system role, tool calls, object arguments)."""
    string_content, typed, system_role, tool_calls, object_args = True, False, True, True, False
    ok, msgs, _ = _probe(source, [{"role": "user", "content": "content"}])
    content = msgs[0]["content"]
    if content.ops & {"selectattr", "array_access"}:
        typed = True
    if not ok:
        string_content = False
    _, msgs, _ = _probe(source, [{"role": "system", "content": "System message"},
                                 {"role": "user", "content": "User message"}])
    if not msgs[0]["content"].used:
        system_role = False
    ok, msgs, tl = _probe(source, _probe_calls({"arg": "value"}), _PROBE_TOOLS)
    if ok:
        if not msgs[1]["tool_calls"].used:
            tool_calls = False
        elif msgs[1]["tool_calls"][0]["function"]["arguments"]["arg"].used:
            object_args = True
    if not object_args:
        ok, msgs, tl = _probe(source, _probe_calls('{"arg": "value"}'), _PROBE_TOOLS)
        if not ok or not msgs[1]["tool_calls"].used:
            tool_calls = False
    return Caps(string_content=string_content, typed_content=typed, system_role=system_role,
                tool_calls=tool_calls, object_arguments=object_args)


def template_caps(template: Template) -> Caps:
    if template.trusted:
        return caps_of(template.source)
    return _untrusted_caps(template.source)


@lru_cache(maxsize=64)
def _untrusted_caps(source: str) -> Caps:
    return Caps(**sandbox.bounded_caps(source))


# -- rendering ------------------------------------------------------------------------------

def _run(tpl: jinja2.Template, ctx: dict[str, Any]) -> str:
    try:
        return tpl.render(**ctx)
    except _RaiseException as exc:
        raise TemplateError(f"chat template refused the conversation: {exc}") from None
    except SecurityError as exc:
        raise TemplateError(f"chat template tried to leave the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"chat template failed: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError, ArithmeticError) as exc:
        raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from None


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


def render(template: Template, messages: list[dict], tools: list[dict] | None = None,
           add_generation_prompt: bool = True, *, build_number: int | None = None,
           now: datetime | None = None, allow_media: bool = True, **kwargs: Any) -> str:
    """The prompt llama-server renders for this request body (``/apply-template``).

    Messages go through the server's own preparation first (``prepare``): arguments parsed
    into objects when the template reads them as objects, typed content joined, a trailing
    assistant message continued. ``allow_media``: the server has a multimodal projector (a
    text-only server refuses image parts). Every failure is a ``TemplateError`` with the reason.
    """
    from replayer.core.prompt.prepare import extra_context, prepare, render_content

    tpl = _compile(template.source, template.trusted)
    prep = prepare(template.source, template_caps(template), messages, tools,
                   add_generation_prompt=add_generation_prompt, build_number=build_number,
                   allow_media=allow_media)
    if not template.trusted and handlers.is_ministral_3(template.source):
        prep.messages = handlers.ministral_3_messages(prep.messages)
    elif not template.trusted and handlers.is_outdated_gemma4(template.source):
        prep.messages = handlers.gemma4_tool_responses(prep.messages)
    ctx: dict[str, Any] = dict(messages=prep.messages, bos_token=template.bos_token, eos_token=template.eos_token,
                               enable_thinking=True)
    if prep.tools:
        ctx["tools"] = prep.tools
    ctx.update(extra_context(now))
    if build_number is not None and build_number >= PRESERVE_REASONING_FROM:
        ctx.update(PRESERVE_REASONING)
    ctx.update(kwargs)
    gen = add_generation_prompt and prep.continuation is None
    if gen:
        ctx["add_generation_prompt"] = True
    prompt = _run(tpl, ctx)
    gpt_oss = "<|channel|>" in template.source
    if prep.continuation is not None:
        if gpt_oss and prompt.rfind("<|return|>") >= 0:  # is_inference without a generation prompt
            i = prompt.rfind("<|return|>")
            prompt = prompt[:i] + "<|end|>" + prompt[i + len("<|return|>"):]
        cont = prep.continuation
        if gpt_oss:
            tail = "<|start|>assistant<|channel|>analysis<|message|>" + cont["reasoning_content"]
            if not prep.continue_reasoning_only:
                tail += "<|end|><|start|>assistant<|channel|>final<|message|>" + render_content(cont)
        else:
            tail = _common_suffix_after_prefix(prompt, _run(tpl, dict(ctx, add_generation_prompt=True)))
            start, end = reasoning_markers(template)
            if start:
                i = tail.find(start)
                tail = (tail if i < 0 else tail[:i]) + start + cont["reasoning_content"]
                if not prep.continue_reasoning_only:
                    tail += end
            if not prep.continue_reasoning_only:
                tail += render_content(cont)
        prompt += tail
    if template.add_bos and template.bos_token and prompt.startswith(template.bos_token):
        prompt = prompt[len(template.bos_token):]
    if template.add_eos and template.eos_token and prompt.endswith(template.eos_token):
        prompt = prompt[:-len(template.eos_token)]
    return prompt


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
