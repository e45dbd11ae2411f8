"""The Jinja environments chat templates render in, with the helpers llama.cpp's engine gives them.

``tojson`` prints as ``jinja::value_to_json`` does (numbers as C++ streams print them),
``raise_exception`` and ``strftime_now`` are the server's globals, and ``{{ }}`` output goes
through ``jinja_values.output`` for untrusted templates (the server's value printing). The
sandboxed environment is for templates from GGUFs, files and servers; the plain one only for
replayer's own bundled templates.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from json.encoder import encode_basestring as _encode_str
from typing import Any

import jinja2
import orjson

from replayer.core.prompt import jinja_values, sandbox

RaiseException = sandbox.RaiseException  # raised by a template's raise_exception(), in or out of the worker


def raise_exception(message: str = "template error") -> None:
    raise RaiseException(message)


def strftime_now(fmt: str) -> str:
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


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False, **_: Any) -> str:
    """The server's ``tojson`` filter (``common/jinja/value.cpp``: ``tojson``)."""
    ind = indent if isinstance(indent, int) and not isinstance(indent, bool) else -1
    seps = list(separators) if isinstance(separators, (list, tuple)) else []
    item_sep = seps[0] if seps else (", " if ind < 0 else ",")
    key_sep = seps[1] if len(seps) > 1 else ": "
    if sort_keys:
        raise RaiseException("tojson sort_keys=true not implemented")
    out: list[str] = []
    _json(value, 0, ind, item_sep, key_sep, out)
    text = "".join(out)
    if ensure_ascii:  # json_ensure_ascii_preserving_format: non-ASCII inside strings as \\uXXXX
        text = "".join(ch if ord(ch) < 128 else json.dumps(ch)[1:-1] for ch in text)
    return text


def fromjson(value: str) -> Any:
    try:
        return orjson.loads(value)
    except (TypeError, ValueError):
        pass
    try:  # what orjson refuses and Python's json takes (NaN, huge integers)
        return json.loads(value)
    except (TypeError, ValueError):
        return {}


def with_helpers(env: jinja2.Environment) -> jinja2.Environment:
    env.filters["tojson"] = tojson
    env.filters["string"] = jinja_values.string_filter
    env.filters["safe"] = jinja_values.safe_filter
    env.filters["fromjson"] = fromjson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV_ARGS = dict(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined,
                 extensions=["jinja2.ext.loopcontrols", jinja_values.GenerationTag], autoescape=False)
#: templates from GGUFs, files and servers: ``{{ }}`` printed as llama.cpp's engine prints it
#: (the bundled ones are written for this project and keep Jinja2's printing)
SANDBOX_ARGS = dict(ENV_ARGS, finalize=jinja_values.output)


@lru_cache(maxsize=1)
def environment() -> sandbox.BoundedSandbox:
    return with_helpers(sandbox.BoundedSandbox(**SANDBOX_ARGS))


@lru_cache(maxsize=1)
def trusted_environment() -> jinja2.Environment:
    """For the bundled templates only (written by this project): same helpers, no sandbox cost.
    Message data cannot run code in Jinja; only template source can, and that is ours here."""
    return with_helpers(jinja2.Environment(**ENV_ARGS))
