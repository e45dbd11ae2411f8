"""The server's reasoning analysis (``reasoning_analysis``), which decides ``enable_thinking``'s
default. Each case is a template shape the C++ analysis (chat-diff-analyzer.cpp of b11434) was
read for; the live check against the real server is tests/test_templates_conformance_live.py
(Apertus there: "Deliberation: disabled" on the server, and now in replayer)."""

from __future__ import annotations

import pytest

from replayer.core.prompt import reasoning_analysis as ra
from replayer.core.prompt import templates
from replayer.core.prompt.templates import Template

CHATML = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n"
          "{%- if m.reasoning_content is defined and m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n"
          "{%- endif %}{{ m.content }}<|im_end|>\n{%- endfor %}"
          "{%- if add_generation_prompt %}<|im_start|>assistant\n"
          "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}")
#: Apertus' shape: enable_thinking changes a word in the middle of the prompt, reasoning is never shown
DELIBERATION = ("<|developer_start|>Deliberation: {% if enable_thinking is defined and enable_thinking %}enabled"
                "{% else %}disabled{% endif %}<|developer_end|>"
                "{%- for m in messages %}<|{{ m.role }}_start|>{{ m.content }}<|{{ m.role }}_end|>{%- endfor %}"
                "{%- if add_generation_prompt %}<|assistant_start|>{% endif %}")
#: a thinking prompt opened only when enable_thinking, at the prompt's very end (with a newline
#: after ``<think>`` the C++ would not see it: it checks that the output ends with the trimmed diff)
OPENS_THINK = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
               "{%- if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking %}<think>{% endif %}"
               "{%- endif %}")
#: reasoning shown only on a turn with tool calls
TOOLS_ONLY = ("{%- for m in messages %}[{{ m.role }}]{% if m.tool_calls %}[THINK]{{ m.reasoning_content }}[/THINK]"
              "[CALLS]{{ m.tool_calls | tojson }}{% else %}{{ m.content }}{% endif %}{%- endfor %}"
              "{%- if add_generation_prompt %}[assistant]{% endif %}")


def _render(source: str):
    tpl = templates._compile(source, True)

    def render(ctx):
        try:
            return tpl.render(**ctx)
        except Exception:  # noqa: BLE001 - a failed variant, as in the analysis
            return None
    return render


@pytest.mark.parametrize("source, mode, start, end", [
    (CHATML, "tag_based", b"<think>\n", b"\n</think>"),
    (DELIBERATION, "none", b"", b""),
    (OPENS_THINK, "tag_based", b"<think>", b""),
    (TOOLS_ONLY, "tools_only", b"[THINK]", b"[/THINK]"),
    ("{% for m in messages %}{{ m.content }}\n{% endfor %}", "none", b"", b""),
])
def test_reasoning_mode_and_markers(source, mode, start, end):
    got = ra.analyze(source, _render(source), supports_tool_calls=True)
    assert (got.mode, got.start, got.end) == (mode, start, end)


def test_a_template_that_refuses_every_probe_has_no_reasoning():
    src = "{{ raise_exception('no') }}"
    assert ra.analyze(src, _render(src), supports_tool_calls=True).mode == "none"


def test_workarounds_set_the_mode_the_cxx_sets():
    old_qwen = "{% for m in messages %}{{ m.content.split('</think>')[-1] }}{% endfor %}"
    got = ra.analyze(old_qwen, _render(old_qwen), supports_tool_calls=False)
    assert (got.mode, got.start, got.end) == ("tag_based", b"<think>", b"</think>")


def test_diff_split_by_markers_and_text():
    d = ra.diff_split(b"<a>x<b>Deliberation: disabled<c>", b"<a>x<b>Deliberation: enabled<c>")
    assert (d.prefix, d.left, d.right, d.suffix) == (b"<a>x<b>Deliberation: ", b"dis", b"en", b"abled<c>")
    d = ra.diff_split(b"<s>hello", b"<s>hello<think>\n")
    assert (d.prefix, d.left, d.right, d.suffix) == (b"<s>hello", b"", b"<think>\n", b"")
    assert ra.segmentize(b"a<b[c>]d[e]") == [(ra.TEXT, b"a"), (ra.MARKER, b"<b[c>"), (ra.TEXT, b"]d"),
                                             (ra.MARKER, b"[e]")]


def test_handlers_decide_before_the_analysis_per_build():
    qwen3_coder_like = "<tool_call>\n<function=x>\n<parameter=y>"
    assert ra.handler_thinking(qwen3_coder_like, 11434) is False  # no <think>: not a thinking model
    assert ra.handler_thinking(qwen3_coder_like + "<think>", 11434) is True
    assert ra.handler_thinking(qwen3_coder_like, 10001) is None  # b10001 has no such handler
    assert ra.handler_thinking("<|role_sep|><|message_sep|>", 10001) is False  # GigaChat V3
    assert ra.handler_thinking("dsml_token DSML tool_calls", 11434) is True
    assert ra.handler_thinking("dsml_token DSML tool_calls", 10001) is None  # b10001 wants function_calls


def test_render_passes_enable_thinking_as_the_server_decides():
    """An untrusted template with Apertus' shape renders "disabled" (the server finds no
    thinking), one that opens a thinking block renders it; a request's kwarg still wins."""
    msgs = [{"role": "user", "content": "hi"}]
    apertus_like = Template(name="a.jinja", source=DELIBERATION)
    assert "Deliberation: disabled" in templates.render(apertus_like, msgs, build_number=11434)
    assert "Deliberation: enabled" in templates.render(apertus_like, msgs, build_number=11434, enable_thinking=True)
    qwen3_like = Template(name="q.jinja", source=OPENS_THINK)
    assert templates.render(qwen3_like, msgs, build_number=10001).endswith("<|im_start|>assistant\n<think>")
    assert templates.thinking_default(templates.bundled("chatml")) is True  # replayer's own: unchanged
