"""The server's message preparation, rule by rule (offline; the live suite checks the whole)."""

from __future__ import annotations

import pytest

from replayer.core.builds import manager
from replayer.core.errors import TemplateError
from replayer.core.prompt import jinja_env, templates


@pytest.fixture(scope="module")
def qwen25():
    src = (manager.sdist_models_dir(9859) / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    return templates.Template("qwen2.5", src)


def _call(args: str) -> list[dict]:
    return [{"role": "user", "content": "find it"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "found"}, {"role": "user", "content": "ok"}]


def test_string_arguments_render_as_objects_when_the_template_reads_objects(qwen25):
    """The issue's first difference: the server parses the string before rendering."""
    assert templates.caps_of(qwen25.source).object_arguments
    text = templates.render(qwen25, _call('{"pattern":"quantize","ratio":1.0,"n":3}'))
    assert '{"name": "grep", "arguments": {"pattern": "quantize", "ratio": 1, "n": 3}}' in text


def test_invalid_arguments_are_refused_as_the_server_refuses(qwen25):
    with pytest.raises(TemplateError, match="failed to parse tool call arguments as JSON"):
        templates.render(qwen25, _call('{"pattern": '))


def test_a_template_reading_strings_keeps_strings():
    tpl = templates.Template("s", "{% for m in messages %}{% for tc in m.tool_calls or [] %}"
                                  "{{ tc.function.arguments }}{% endfor %}{% endfor %}")
    assert not templates.caps_of(tpl.source).object_arguments
    assert templates.render(tpl, _call('{"pattern":"q"}')) == '{"pattern":"q"}'


def test_typed_parts_joined_by_newline_null_content_empty_and_reasoning_kept():
    tpl = templates.Template("t", "{% for m in messages %}[{{ m.role }}|{{ m.content }}|{{ m.reasoning_content }}|"
                                  "{{ m.content is none }}]{% endfor %}")
    out = templates.render(tpl, [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                 {"role": "assistant", "content": None, "reasoning_content": "r",
                                  "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                                 {"role": "tool", "tool_call_id": "c", "content": "x"},
                                 {"role": "user", "content": "q"}])
    assert out == "[user|a\nb||False][assistant||r|False][tool|x||False][user|q||False]"


def test_no_system_role_merges_system_into_the_next_message_with_a_newline():
    tpl = templates.Template("ns", "{% for m in messages %}{% if m.role != 'system' %}<{{ m.role }}>{{ m.content }}"
                                   "{% endif %}{% endfor %}")
    assert not templates.caps_of(tpl.source).system_role
    assert templates.render(tpl, [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]) == "<user>S\nU"


def test_trailing_assistant_is_continued_not_rendered():
    chatml = templates.bundled("chatml")
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    assert templates.render(chatml, msgs).endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello")
    coder = templates.bundled("qwen3-coder")
    out = templates.render(coder, [msgs[0], dict(msgs[1], reasoning_content="think")])
    assert out.endswith("<|im_start|>assistant\n<think>\nthink\n</think>\n\nHello")
    with pytest.raises(TemplateError, match="2 or more assistant"):
        templates.render(chatml, msgs + [{"role": "assistant", "content": "again"}])


def test_tojson_prints_numbers_as_the_server_does():
    assert jinja_env.tojson({"a": [1, 2.5, 1.0, 1e-7], "b": "é\n"}) == '{"a": [1, 2.5, 1, 1e-07], "b": "é\\n"}'
    assert jinja_env.tojson([1, {"k": 2}], indent=2) == '[\n  1,\n  {\n    "k": 2\n  }\n]'


def test_builds_share_a_layout_only_where_the_server_renders_alike():
    """``prepare`` lays a prompt out once per ``span_rule``: for a template the server trims
    messages for (StepFun's, from b10001), b9934 and b10001 must not share a layout."""
    from replayer.core.builds.catalog import parse_build
    from replayer.core.prepare import span_rule
    from replayer.core.prompt.template_inputs import _STEPFUN

    src = "{# " + _STEPFUN + " #}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    stepfun = templates.Template(name="stepfun-like", source=src)
    msgs = [{"role": "user", "content": "  padded  "}]
    old, new = parse_build("9934"), parse_build("10001")
    assert (templates.render(stepfun, msgs, build_number=old.effective_number)
            != templates.render(stepfun, msgs, build_number=new.effective_number))
    assert span_rule(old, stepfun) != span_rule(new, stepfun)
    chatml = templates.bundled("chatml")
    assert (templates.render(chatml, msgs, build_number=old.effective_number)
            == templates.render(chatml, msgs, build_number=new.effective_number))
    assert span_rule(old, chatml)[3:] == span_rule(new, chatml)[3:]  # the trim rule plays no part here


def test_lfm2_templates_read_past_reasoning_as_thinking_once_it_is_kept():
    """common_chat_params_init_lfm2 copies reasoning_content to message.thinking; b11434 keeps
    past reasoning by default, b10001 does not (the live conformance test compares with both)."""
    src = (manager.sdist_models_dir(11434) / "templates" / "LFM2.5-8B-A1B.jinja").read_text(encoding="utf-8")
    tpl = templates.Template(name="lfm2.5", source=src)
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "reasoning_content": "PAST-REASONING"},
            {"role": "user", "content": "again"}]
    assert "PAST-REASONING" in templates.render(tpl, msgs, build_number=11434)
    assert "PAST-REASONING" not in templates.render(tpl, msgs, build_number=10001)
