"""The render worker of :mod:`sandbox`: a separate process that renders one untrusted template
at a time under memory and CPU caps, and answers with the text or the error's kind. It is its
own module so that the parent side (``sandbox``) never imports ``templates``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson

from replayer.core.frames import receive_frame, send_frame
from replayer.core.prompt.sandbox import HEADROOM_MIN, HEADROOM_PER_OUTPUT, READY, BudgetExceeded, RaiseException

# -- the worker's side ---------------------------------------------------------------------

def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _render_one(request: dict[str, Any]) -> dict[str, Any]:
    import resource

    import jinja2

    from replayer.core.prompt import jinja_env, template_probe

    max_bytes = int(request["max_bytes"])
    env = jinja_env.environment()
    env.max_bytes = max_bytes
    limits = []
    try:
        tpl = _compiled(env, request["source"])
        try:  # memory and CPU caps for this render only: hooks can miss, the kernel cannot
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            limits.append((resource.RLIMIT_CPU, resource.getrlimit(resource.RLIMIT_CPU)))
            used = int(cpu.ru_utime + cpu.ru_stime)
            resource.setrlimit(resource.RLIMIT_CPU, (used + int(request["seconds"]) + 2, resource.RLIM_INFINITY))
            limits.append((resource.RLIMIT_AS, resource.getrlimit(resource.RLIMIT_AS)))
            headroom = max(HEADROOM_MIN, HEADROOM_PER_OUTPUT * max_bytes)
            resource.setrlimit(resource.RLIMIT_AS, (_address_space() + headroom, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            pass
        if request.get("op") == "caps":
            import dataclasses

            return {"caps": dataclasses.asdict(template_probe.caps_of(request["source"]))}
        if request.get("op") == "thinking":
            return {"thinking": _thinking(tpl, request["source"], request["ctx"])}
        text = tpl.render(**request["ctx"])
        if len(text) > max_bytes:
            return {"kind": "budget", "message": f"a prompt of {len(text):,} characters is over the output budget"}
        return {"text": text}
    except MemoryError:
        return {"kind": "budget", "message": "the render ran out of its memory budget"}
    except BudgetExceeded as exc:
        return {"kind": "budget", "message": str(exc)}
    except RaiseException as exc:
        return {"kind": "raise_exception", "message": str(exc)}
    except jinja2.UndefinedError as exc:
        return {"kind": "UndefinedError", "message": str(exc)}
    except RecursionError:
        return {"kind": "RecursionError", "message": "templates nested too deep"}
    except jinja2.TemplateSyntaxError as exc:
        return {"kind": "syntax", "message": f"chat template syntax error at line {exc.lineno}: {exc.message}"}
    except Exception as exc:  # noqa: BLE001 - every template error is reported, never raised here
        return {"kind": type(exc).__name__, "message": " ".join(str(exc).split())[:300]}
    finally:
        for which, old in reversed(limits):
            try:
                resource.setrlimit(which, old)
            except (ValueError, OSError):
                pass


def _thinking(tpl, source: str, ctx: dict[str, Any]) -> bool:
    """The server's reasoning analysis of this template (``reasoning_analysis``): its renders
    here, one after the other, on this request's budget; a render that fails is the analysis'
    "template application failed"."""
    from replayer.core.prompt import reasoning_analysis

    def render(c: dict[str, Any]) -> str | None:
        try:
            return tpl.render(**c)
        except (BudgetExceeded, MemoryError):
            raise
        except Exception:  # noqa: BLE001 - any refusal is a failed variant, as in the C++
            return None

    found = reasoning_analysis.analyze(source, render, supports_tool_calls=bool(ctx.get("tool_calls")),
                                       bos=ctx.get("bos_token", ""), eos=ctx.get("eos_token", ""))
    return found.mode != "none"


_COMPILED: dict[str, Any] = {}


def _compiled(env, source: str):
    tpl = _COMPILED.get(source)
    if tpl is None:
        if len(_COMPILED) > 16:
            _COMPILED.clear()
        tpl = _COMPILED[source] = env.from_string(source)
    return tpl


def _serve() -> None:
    # the kernel kills this worker when replayer dies: ``children.spawn_tied`` started it
    from replayer.core.prompt import templates  # noqa: F401 - imported before saying ready

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(READY)
    stdout.flush()
    while (data := receive_frame(stdin)) is not None:
        request = orjson.loads(data)
        del data
        reply = _render_one(request)
        del request
        send_frame(stdout, orjson.dumps(reply))


if __name__ == "__main__":  # run as a module: use the importable copy, whose classes templates raise
    from replayer.core.prompt.sandbox_worker import _serve as serve

    serve()
