"""A chat template's capabilities, probed as llama-server probes them (``jinja::caps_get``).

The server runs the template on fixed probe conversations and records which values it reads
and how (``common/jinja/caps.cpp``); what it finds decides how messages are prepared (string
or typed content, a system role, object tool arguments). The probe values here record reads
through their overrides and the environment's attribute/item access.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from replayer.core.prompt import jinja_env, sandbox
from replayer.core.prompt.template_inputs import Caps

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
    env = jinja_env.with_helpers(_ProbeEnvironment(**jinja_env.SANDBOX_ARGS))
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
