"""Untrusted templates render as llama.cpp's Jinja engine renders them (common/jinja/ of the
b10001 sdist; docs/templates.md cites each rule), through the sandbox's worker."""

from __future__ import annotations

import pytest

from replayer.core.errors import TemplateError
from replayer.core.prompt import jinja_values, templates
from replayer.core.prompt.templates import Template

MSGS = [{"role": "user", "content": "hi"}]


def _render(body: str, **ctx) -> str:
    """``body`` rendered by the worker, with ``ctx`` passed as template kwargs."""
    return templates.render(Template(name="t", source=body), MSGS, add_generation_prompt=False, **ctx)


@pytest.mark.parametrize("body, ctx, want", [
    # {{ }} of each type (runtime.h:724)
    ("{{ f }}|{{ g }}|{{ h }}|{{ k }}", dict(f=1e-07, g=2.0, h=0.1 + 0.2, k=-1.25), "0.0|2.0|0.3|-1.25"),
    ("[{{ d }}][{{ n }}][{{ u }}]", dict(d={"a": 1}, n=None), "[][][]"),
    ("{{ l }}|{{ t }}|{{ b }}", dict(l=[1, "a", [2.5, True]], t=False, b=True), "1a2.5True|False|True"),
    # |string and |safe of numbers are tojson (value.cpp:551-552, 576-577); of bool/None (value.cpp:940, 1306)
    ("{{ g|string }}|{{ f|string }}|{{ i|string }}|{{ b|string }}|{{ n|string }}",
     dict(g=2.0, f=1e-07, i=7, b=True, n=None), "2|1e-07|7|True|None"),
    ("{{ l|string }}|{{ d|string }}", dict(l=[1, "it's", None, 0.5], d={"k": "v"}),
     "[1, \"it's\", None, 0.5]|{'k': 'v'}"),
    # |safe is a no-op: nothing added to it is escaped (value.cpp:869)
    ("{{ (s|safe) + '<' + s }}", dict(s='{"a": "<b>&"}'), '{"a": "<b>&"}<{"a": "<b>&"}'),
    # + and ~ with None/undefined: the missing side is empty (runtime.cpp:130-146); str + number (runtime.cpp:245)
    ("{{ 'a' + u }}|{{ 'b' + n }}|{{ n ~ 'c' }}|{{ 'd' + 1 }}|{{ 'e' ~ 0.5 }}", dict(n=None), "a|b|c|d1|e0.5"),
    # list.append and pop (value.cpp:1090, 1101), as Kimi-K2's templates use them
    ("{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(1) %}{% set _ = ns.l.append('x') %}"
     "{{ ns.l|length }}{{ ns.l.pop() }}{{ ns.l|length }}", {}, "2x1"),
    # {% generation %} parses as a no-op statement around its body (parser.cpp:207)
    ("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}", {}, "[hi]"),
])
def test_values_print_as_the_server_prints_them(body, ctx, want):
    assert _render(body, **ctx) == want


def test_what_is_dangerous_is_still_refused():
    # private attributes stay undefined (nothing of Python leaks into the prompt) ...
    assert _render("{{ ''.__class__.__mro__ }}|{{ cycler.__init__.__globals__ }}|{{ 'x' + ''.__class__ }}") == "||x"
    # ... and mutating anything but a list is refused, as before
    with pytest.raises(TemplateError, match="'update' of 'dict' object is unsafe"):
        _render("{{ d.update({'a': 1}) }}", d={})
    # two undefined or two None operands are an error on the server as well
    with pytest.raises(TemplateError):
        _render("{{ n + n }}", n=None)


def test_bundled_templates_keep_jinja2_printing():
    """replayer's own templates render in-process with Jinja2's rules (written and checked
    against real servers as they are)."""
    tpl = templates.bundled("chatml")
    assert tpl.trusted
    out = templates.render(tpl, [{"role": "user", "content": "x"}])
    assert out.startswith("<|im_start|>") and out.endswith("<|im_start|>assistant\n")


def test_float_forms():
    assert [jinja_values.float_str(v) for v in (1e-07, 100.0, 1.5e10, -0.0, 123.4567891)] == \
        ["0.0", "100.0", "15000000000.0", "-0.0", "123.456789"]
    assert [jinja_values.json_float(v) for v in (2.0, 1e-07, 123456789.0, 0.1)] == ["2", "1e-07", "1.23457e+08", "0.1"]


def test_map_gives_an_array_to_tojson_and_to_printing():
    """``tools|map(attribute='function')|tojson`` (llama-cpp-deepseek-r1): an array on the server
    (value.cpp:1061), a generator in Jinja2 that used to print as ``null``."""
    body = "{{ ts|map(attribute='function')|tojson }}|{{ ts|map(attribute='n') }}"
    assert _render(body, ts=[{"function": {"name": "a"}, "n": 1}, {"function": {"name": "b"}, "n": 2}]) == \
        '[{"name": "a"}, {"name": "b"}]|12'


def test_the_capability_probe_sees_reads_through_get():
    """Reka-Edge reads its system turn with ``messages[0].get('content')``: the server's probe
    counts that as a read (value.cpp:1211), so the system role is supported, not folded."""
    src = ("{% if messages[0].get('role') == 'system' %}S:{{ messages[0].get('content') }}|{% endif %}"
           "{% for m in messages %}{% if m.role != 'system' %}{{ m.role }}:{{ m.content }}|{% endif %}{% endfor %}")
    assert templates.caps_of(src).system_role
    # printing an object is not reading its values: string + object arguments stay strings
    src2 = ("{% for m in messages %}{% for c in m.tool_calls or [] %}{{ '>' + c.function.arguments }}"
            "{% endfor %}{{ m.content }}{% endfor %}")
    assert not templates.caps_of(src2).object_arguments


def test_past_reasoning_is_kept_by_default_from_b10865():
    """GLM-4.7-Flash-style templates drop past reasoning unless ``clear_thinking`` is false: the
    server sets it (and its siblings) from b10865 by default (common/arg.cpp), not on b10001."""
    src = ("{% for m in messages %}{% if m.reasoning_content and (clear_thinking is defined and not clear_thinking"
           " or preserve_thinking) %}<t>{{ m.reasoning_content }}</t>{% endif %}{{ m.content }}|{% endfor %}")
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"},
            {"role": "user", "content": "q2"}]
    tpl = Template(name="t", source=src)
    assert templates.render(tpl, msgs, add_generation_prompt=False, build_number=10001) == "q|a|q2|"
    assert templates.render(tpl, msgs, add_generation_prompt=False, build_number=11434) == "q|<t>r</t>a|q2|"
    assert templates.render(tpl, msgs, add_generation_prompt=False, build_number=11434,
                            clear_thinking=True, preserve_thinking=False) == "q|a|q2|"


def test_ministral_3_handler_turns_reasoning_into_a_thinking_block():
    """chat.cpp's Ministral-3 handler (Devstral-Small-2507's template reads like it): content
    blocks [thinking, text]; a template reading the first block's text loses the text."""
    src = ("[SYSTEM_PROMPT][/SYSTEM_PROMPT]{% for m in messages %}{% if m.role == 'assistant' %}"
           "{% for b in m.content %}<{{ b.type }}:{{ b.thinking or b.text }}>{% endfor %}[TOOL_CALLS][ARGS]"
           "{% else %}{{ m.content }}{% endif %}{% endfor %}")
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]
    out = templates.render(Template(name="t", source=src), msgs, add_generation_prompt=False)
    assert out == "[SYSTEM_PROMPT][/SYSTEM_PROMPT]q<thinking:r><text:a>[TOOL_CALLS][ARGS]"
    with_call_id = src.replace("[ARGS]", "[ARGS][CALL_ID]")  # Mistral-Small-3.2: not this handler
    assert "<thinking:" not in templates.render(Template(name="t", source=with_call_id), msgs,
                                                 add_generation_prompt=False)


def test_outdated_gemma4_templates_get_tool_responses_folded_into_the_call_turn():
    """``convert_tool_responses_gemma4`` (chat.cpp): tool results after a call become its
    ``tool_responses`` (JSON parsed when it is JSON), the answer after them its content."""
    from replayer.core.prompt import handlers

    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": {"p": 1}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
            {"role": "tool", "tool_call_id": "c2", "content": "plain text"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "next"}]
    out = handlers.gemma4_tool_responses(msgs)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1]["tool_responses"] == [{"name": "read", "response": {"ok": True}},
                                        {"name": "c2", "response": "plain text"}]
    assert out[1]["content"] == "done" and out[1]["reasoning_content"] == "r"
    assert handlers.is_outdated_gemma4("{{ '<|tool_call>call:' + f }}")
    assert not handlers.is_outdated_gemma4("{#- OpenAI Chat Completions: scan -#}{{ '<|tool_call>call:' + f }}")
