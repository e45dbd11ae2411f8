"""How llama.cpp's Jinja engine prints and combines values, where it differs from Jinja2.

llama-server renders chat templates with its own engine (``common/jinja/`` of the sdist), not
Python's. Where the two differ on what templates ordinarily do, replayer's renderer follows
the server (file:line of b10001's sdist; docs/templates.md has the list):

- ``{{ value }}`` (``gather_string_parts_recursive``, runtime.h:724): strings as they are,
  numbers and booleans through ``as_string``, arrays item after item without brackets, and
  nothing at all for objects, ``None`` and undefined;
- a float's ``as_string`` (value.h:258) is C's ``%f`` with trailing zeros dropped but one:
  ``1e-07`` → ``0.0``, ``0.1 + 0.2`` → ``0.3``; ``|string``/``|safe`` of a number is its
  ``tojson`` (value.cpp:551-552, 576-577): a float with six significant digits, ``2.0`` → ``2``;
- ``|safe`` is a no-op on strings (value.cpp:869), never markup that escapes what is added to it;
- ``'text' + undefined`` and ``+``/``~`` with ``None`` treat the missing side as an empty string
  (``workaround_concat_null_with_str``, runtime.cpp:130-146); a string ``+`` a non-string
  concatenates ``as_string`` of both (runtime.cpp:245-251);
- a container's string form (``value_to_string_repr``, value.cpp:1555) quotes strings in
  single quotes unless they hold one (then JSON), ``True``/``False``/``None`` as Python does.
"""

from __future__ import annotations

import types
from typing import Any

import jinja2
import jinja2.compiler
import jinja2.ext


def float_str(v: float) -> str:
    """``value_float_t::as_string``: ``std::to_string`` (``%f``), trailing zeros off, one kept."""
    out = "%f" % v
    if "." in out:
        out = out.rstrip("0")
        if out.endswith("."):
            out += "0"
    return out


def json_float(v: float) -> str:
    """A float as ``ostream << double`` writes it in ``tojson`` (six significant digits)."""
    return "%g" % v


def repr_str(v: Any) -> str:
    """``value_to_string_repr``: an item inside a printed array or object."""
    if isinstance(v, str):
        if "'" in v:
            import json

            return json.dumps(v, ensure_ascii=False)
        return f"'{v}'"
    if v is None:
        return "None"
    return as_string(v)


def _listed(v: Any) -> Any:
    """Jinja2's ``map``/``select`` give generators where the server's give arrays."""
    return list(v) if isinstance(v, types.GeneratorType) else v


def as_string(v: Any) -> str:
    """``value_t::as_string`` of each type (value.h): what ``+`` and ``join`` see."""
    v = _listed(v)
    if isinstance(v, str):
        return v
    if v is True or v is False:
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return float_str(v)
    # the base classes' iteration, not a subclass's: printing a value is not reading it for the
    # server's capability probe (template_probe._PDict/_PList record reads through their overrides)
    if isinstance(v, tuple):
        inner = ", ".join(repr_str(x) for x in tuple.__iter__(v))
        return f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, list):
        return "[" + ", ".join(repr_str(x) for x in list.__iter__(v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{repr_str(k)}: {repr_str(x)}" for k, x in dict.items(v)) + "}"
    if v is None:
        return "None"
    if isinstance(v, jinja2.Undefined):
        return ""
    return str(v)


def output(v: Any) -> str:
    """``{{ v }}`` as the server writes it (Jinja2's ``finalize`` hook)."""
    v = _listed(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, int, float)):
        return as_string(v)
    if isinstance(v, list):
        return "".join(output(x) for x in list.__iter__(v))
    if isinstance(v, tuple):
        return "".join(output(x) for x in v)
    if isinstance(v, jinja2.Undefined):
        return str(v)  # "", or the sandbox's SecurityError for an attribute it refused
    return ""  # objects, None, functions


def string_filter(v: Any) -> str:
    """``|string`` per type: ``as_string``, but floats through ``tojson`` and undefined as Jinja2 says."""
    if isinstance(v, float):
        return json_float(v)
    if isinstance(v, jinja2.Undefined):
        return str(v)
    return as_string(v)  # booleans, integers, None and the rest print alike in both


def safe_filter(v: Any) -> str:
    """``|safe``: a no-op on strings (value.cpp:869), ``|string`` on anything else."""
    return v if isinstance(v, str) else string_filter(v)


def _empty(v: Any) -> str:
    return "" if v is None else str(v)


def _missing(v: Any) -> bool:
    return v is None or isinstance(v, jinja2.Undefined)


def concat(left: Any, right: Any) -> Any:
    """``left + right`` when one side is a string, as the server's binary ``+`` does; anything
    else: ``NotImplemented`` (Python's own ``+`` applies)."""
    ls, rs = isinstance(left, str), isinstance(right, str)
    if not (ls or rs):
        return NotImplemented
    if _missing(left) or _missing(right):  # str() of an undefined: "" (or the sandbox's refusal)
        return "".join((left if ls else _empty(left), right if rs else _empty(right)))
    return "".join((as_string(left), as_string(right)))  # plain str: never markup that escapes


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}…{% endgeneration %}`` (transformers' assistant-mask markers): the server
    parses each tag as a no-op statement (parser.cpp:207-211), so the body renders as is."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def concat_all(*values: Any) -> str:
    """``a ~ b ~ c``, left to right, as the server's binary ``~`` (the rules of :func:`concat`)."""
    acc: Any = values[0] if values else ""
    for v in values[1:]:
        joined = concat(acc, v)
        acc = "".join((as_string(acc), as_string(v))) if joined is NotImplemented else joined
    return acc if isinstance(acc, str) else as_string(acc)


class ServerCodeGenerator(jinja2.compiler.CodeGenerator):
    """Jinja2's compiler with ``~`` as the server's: ``environment.concat_values`` instead of
    ``str()`` of each operand (``'a' ~ None`` is ``a`` on the server, ``aNone`` in Jinja2)."""

    def visit_Concat(self, node: Any, frame: Any) -> None:
        self.write("environment.concat_values((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")
