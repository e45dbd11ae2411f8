"""Output ``{{ 'head' + message.content + 'tail' }}`` as pieces, not as one concatenated copy.

Chat templates build every message with ``+``. Jinja evaluates that expression to a new
string (a copy of the message) and keeps each one until the whole prompt is joined, so a
session's text exists twice before the prompt exists once. Emitting the operands as separate
outputs renders the same characters without those copies; the peak memory of a replay of a
large session is mostly that (docs/benchmarks.md, ``memory``).

The rewrite must not change what a template does, including how it fails: ``+`` of a string
and a non-string raises, and that failure is what the server's message-shape retries react
to. So an ``a + b + c`` whose operands are plain lookups (evaluating them twice is harmless)
becomes ``{% if all strings %}{{ a }}{{ b }}{{ c }}{% else %}{{ a + b + c }}{% endif %}``,
and Jinja's ``~`` (which turns every operand into a string anyway) is always split. It is
applied to the bundled templates, which this project writes and tests against real servers.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, nodes

ALL_STR = "__replayer_all_str"


def _all_str(*values: Any) -> bool:
    """A Jinja *test*, not a global: the sandbox sends every global call through
    ``environment.call`` (its safety checks), while a test is called directly; the guard runs
    for ~3,000 outputs of a 2,000-message session (docs/benchmarks.md, core)."""
    for v in values:
        if type(v) is not str:
            return False
    return True


def _pure(n: nodes.Node) -> bool:
    """Reads that have no side effects and give the same value when read twice."""
    if isinstance(n, (nodes.Name, nodes.Const)):
        return True
    if isinstance(n, nodes.Getattr):
        return _pure(n.node)
    if isinstance(n, nodes.Getitem):
        return _pure(n.node) and _pure(n.arg)
    if isinstance(n, nodes.CondExpr):
        return _pure(n.test) and _pure(n.expr1) and (n.expr2 is None or _pure(n.expr2))
    if isinstance(n, nodes.Compare):
        return _pure(n.expr) and all(_pure(op.expr) for op in n.ops)
    return False


def _operands(n: nodes.Expr, kind: type) -> list[nodes.Expr]:
    """The flattened operands of a chain of ``kind`` (``Add`` or ``Concat``); ``[n]`` otherwise."""
    if not isinstance(n, kind):
        return [n]
    parts = [n.left, n.right] if kind is nodes.Add else n.nodes
    return [x for part in parts for x in _operands(part, kind)]


def _expand(out: nodes.Output) -> list[nodes.Node]:
    """The statements that replace one output node."""
    result: list[nodes.Node] = []
    pending: list[nodes.Expr] = []
    for child in out.nodes:
        if isinstance(child, nodes.Concat):
            pending += _operands(child, nodes.Concat)
            continue
        ops = _operands(child, nodes.Add)
        if len(ops) > 1 and all(_pure(o) for o in ops):
            if pending:
                result.append(nodes.Output(pending, lineno=out.lineno))
                pending = []
            test = nodes.Test(ops[0], ALL_STR, ops[1:], [], None, None, lineno=out.lineno)
            result.append(nodes.If(test, [nodes.Output(ops, lineno=out.lineno)], [],
                                   [nodes.Output([child], lineno=out.lineno)], lineno=out.lineno))
            continue
        pending.append(child)
    if pending:
        result.append(nodes.Output(pending, lineno=out.lineno))
    return result


def _rewrite(node: nodes.Node) -> None:
    for name, value in node.iter_fields():
        if isinstance(value, list):
            new: list[Any] = []
            for item in value:
                if isinstance(item, nodes.Output):
                    new += _expand(item)
                else:
                    if isinstance(item, nodes.Node):
                        _rewrite(item)
                    new.append(item)
            setattr(node, name, new)
        elif isinstance(value, nodes.Node):
            _rewrite(value)


def compile_in_pieces(env: Environment, source: str) -> Any:
    """``env.from_string(source)`` with the outputs' concatenations emitted as pieces."""
    env.tests.setdefault(ALL_STR, _all_str)
    tree = env.parse(source)
    _rewrite(tree)
    tree.set_environment(env)
    return env.from_string(tree)
