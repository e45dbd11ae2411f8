"""The bundled templates' outputs are emitted in pieces: same text, same failures as ``+``."""

from __future__ import annotations

import jinja2
import pytest

from replayer.core.prompt import output_pieces, templates
from replayer.core.prompt.jinja_env import ENV_ARGS

SOURCES = [
    "{{ 'a' + x + 'b' }}",
    "{{- '<|im_start|>' + m['role'] + '\\n' + m.content + '<|im_end|>\\n' }}",
    "{% for m in ms %}{{ (p if loop.index0 <= 1 else '') + m }}{% endfor %}",
    "{{ x ~ 1 ~ y }}",
    "{{ 1 + n }}",
    "{{ items + more }}",
    "{% if x %}{{ x + '!' }}{% else %}{{ y + '?' }}{% endif %}",
    "{% macro f(v) %}{{ '[' + v + ']' }}{% endmacro %}{{ f(x) }}",
    "{{ x + y|trim }}",
]
CONTEXTS = [
    dict(x="hello", y=" world ", m={"role": "user", "content": "hi"}, ms=["a", "b", "c"], p="P", n=2,
         items=[1], more=[2]),
    dict(x="", y=None, m={"role": "user", "content": None}, ms=[], p="", n=2.5, items="s", more="t"),
    dict(x=3, y=4, m={"role": "user", "content": ["part"]}, ms=[1, 2], p=0, n=-1, items=(1,), more=(2,)),
]


def _outcome(tpl: jinja2.Template, ctx: dict) -> str:
    try:
        return tpl.render(**ctx)
    except Exception as exc:  # the failure kind is part of the behaviour that must not change
        return f"{type(exc).__name__}"


@pytest.mark.parametrize("source", SOURCES)
def test_pieces_render_and_fail_exactly_as_plain_jinja(source):
    plain = jinja2.Environment(**ENV_ARGS).from_string(source)
    pieces = output_pieces.compile_in_pieces(jinja2.Environment(**ENV_ARGS), source)
    for ctx in CONTEXTS:
        assert _outcome(pieces, ctx) == _outcome(plain, ctx), (source, ctx)


def test_string_concatenation_is_split_into_outputs():
    env = jinja2.Environment(**ENV_ARGS)
    tree = env.parse("{{ 'a' + x + 'b' }}")
    output_pieces._rewrite(tree)
    (branch,) = tree.body
    assert isinstance(branch, jinja2.nodes.If)
    assert len(branch.body[0].nodes) == 3  # the pieces, when all are strings
    assert isinstance(branch.else_[0].nodes[0], jinja2.nodes.Add)  # the original otherwise


def test_calls_are_not_evaluated_twice():
    env = jinja2.Environment(**ENV_ARGS)
    seen = []
    src = "{{ 'a' + f() }}"
    pieces = output_pieces.compile_in_pieces(env, src)
    assert pieces.render(f=lambda: seen.append(1) or "x") == "ax"
    assert seen == [1]


@pytest.mark.parametrize("name", list(templates.BUNDLED))
def test_bundled_templates_are_compiled_in_pieces(name):
    tpl = templates.bundled(name)
    compiled = templates._compile(tpl.source, tpl.trusted)
    assert output_pieces.ALL_STR in compiled.environment.tests
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}]
    # rendered through the server's message preparation, the same text as the plain template
    pieces_text = templates.render(tpl, msgs)
    templates._compile.cache_clear()
    orig = output_pieces.compile_in_pieces
    try:
        output_pieces.compile_in_pieces = lambda env, src: env.from_string(src)
        assert templates.render(tpl, msgs) == pieces_text
    finally:
        output_pieces.compile_in_pieces = orig
        templates._compile.cache_clear()
