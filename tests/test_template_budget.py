"""Untrusted chat templates render on a budget: every hostile one ends as one clear line,
the render process is replaced after it, and honest templates render exactly as before.
Text inputs refuse FIFOs, devices and binaries without waiting.
"""

from __future__ import annotations

import os
import resource

import pytest

from conftest import FIXTURES
from helpers import agent_conversation
from replayer.cli import main
from replayer.core.errors import ReplayerError, TemplateError
from replayer.core.prompt import sandbox, templates
from replayer.core.prompt.layout import compute_layout
from replayer.core.prompt.templates import Template
from replayer.core.session.request import load_system_prompt, load_tools
from replayer.core.textfile import read_text

HOSTILE = {
    "division": ("{{ 1/0 }}", "ZeroDivisionError"),
    "huge range": ("{% for i in range(10**9) %}x{% endfor %}", "Range too big"),
    "huge power": ("{{ 10**(10**7) }}", "too large to build"),
    "huge repeat": ("{{ 'a' * 10**9 }}", "over the output budget"),
    "repeat a list": ("{% for x in [1] * 10**9 %}{% endfor %}", "over the output budget"),
    "doubling concat": ('{% set ns = namespace(s="ab") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}'
                        "{% endfor %}{{ ns.s|length }}", "budget"),
    "huge filter": ("{{ 'a'|center(10**9) }}", "budget"),
    "nested loops": ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
                     "did not finish within 1 s"),
    "recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
    "raise": ("{{ raise_exception('no tools here') }}", "refused the conversation: no tools here"),
    "escape": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "tried to leave the sandbox"),
    "undefined call": ("{{ nothing() }}", "chat template failed"),
}


@pytest.fixture
def small_budget():
    sandbox.set_budget(1.0, 16)
    yield
    sandbox.set_budget()


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_template_is_one_clear_line(small_budget, name):
    source, needle = HOSTILE[name]
    with pytest.raises(TemplateError) as err:
        templates.render(Template(name="hostile", source=source), [{"role": "user", "content": "hi"}])
    msg = str(err.value)
    assert needle in msg and "\n" not in msg, msg
    # the worker that ran it is gone or still healthy: the next render works
    assert templates.render(Template(name="ok", source="{{ messages[0].content }}!"),
                            [{"role": "user", "content": "hi"}]) == "hi!"


def test_the_worker_is_held_to_its_memory_cap(small_budget):
    with pytest.raises(TemplateError):
        templates.render(Template(name="hostile", source=HOSTILE["doubling concat"][0]), [])
    # this process never grew by the gigabytes the template asked for
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2 * 1024 * 1024  # KiB


def test_a_template_in_a_gguf_is_bounded_too(small_budget, tmp_path):
    from replayer.core.tiny_models import make_tiny

    model = make_tiny("llama", tmp_path / "hostile.gguf", chat_template=HOSTILE["nested loops"][0])
    with pytest.raises(TemplateError, match="did not finish within 1 s"):
        compute_layout([{"role": "user", "content": "hi"}], None, tokenizer=f"gguf:{model}")


@pytest.mark.parametrize("family", list(templates.BUNDLED))
def test_untrusted_render_equals_the_in_process_render(family):
    """The worker changes where a template runs, not what it renders (incl. the message-shape
    retries for tool calls): the bundled templates, sent through it, render the same text."""
    msgs, tools = agent_conversation(rounds=6)
    trusted = templates.bundled(family)
    untrusted = Template(name=f"file-{family}", source=trusted.source, bos_token=trusted.bos_token)
    assert not untrusted.trusted
    want = templates.render(trusted, msgs, tools)
    assert templates.render(untrusted, msgs, tools) == want and len(want) > 1000


def test_cli_flags_set_the_budget(tmp_path, capsys):
    tpl = tmp_path / "loops.jinja"
    tpl.write_text(HOSTILE["nested loops"][0])
    try:
        rc = main(["layout", str(FIXTURES / "pi" / "small-v3.jsonl"), "--template", str(tpl),
                   "--template-timeout", "0.5"])
        err = capsys.readouterr().err
        assert rc == 2 and "did not finish within 0.5 s" in err and err.count("\n") == 1
        tpl.write_text("{% for m in messages %}{{ m.content }}{% endfor %}{{ 'x' * 3000000 }}")
        rc = main(["layout", str(FIXTURES / "pi" / "small-v3.jsonl"), "--template", str(tpl),
                   "--template-max-mb", "1"])
        err = capsys.readouterr().err
        assert rc == 2 and "over the output budget" in err
    finally:
        sandbox.set_budget()


# -- text inputs ---------------------------------------------------------------------------

@pytest.fixture
def odd_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)))
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    return {"fifo": (fifo, "FIFO"), "device": ("/dev/zero", "device"), "folder": (tmp_path, "folder"),
            "binary": (binary, "binary"), "latin-1": (latin, "not UTF-8"), "missing": (tmp_path / "nope", "No such")}


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "binary", "latin-1", "missing"])
@pytest.mark.parametrize("reader", ["template", "system prompt", "tools"])
def test_text_inputs_refuse_what_is_not_text(odd_files, kind, reader):
    path, needle = odd_files[kind]
    load = {"template": templates.from_file, "system prompt": load_system_prompt, "tools": load_tools}[reader]
    with pytest.raises(ReplayerError) as err:
        load(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    if reader != "tools" or kind not in ("binary", "latin-1"):  # tools are JSON: "is not JSON" is right too
        assert needle in msg, msg


def test_text_input_reads_utf8(tmp_path):
    p = tmp_path / "sp.txt"
    p.write_text("Ünïcode system prompt\n", encoding="utf-8")
    assert read_text(p, "system prompt") == "Ünïcode system prompt\n"


def test_the_render_worker_outlives_the_thread_that_started_it():
    """The worker dies with replayer (``PR_SET_PDEATHSIG``), which the kernel ties to the thread
    that forked it: started from the thread of the first render, it died when that thread
    ended and the next render paid a new worker's start. Now one long-lived thread forks it."""
    import threading
    import time

    sandbox._worker.stop()
    tpl = Template(name="untrusted", source="{{ messages[0].content }}!")
    msgs = [{"role": "user", "content": "hi"}]
    seen = []
    t = threading.Thread(target=lambda: seen.append(templates.render(tpl, msgs)))
    t.start()
    t.join()
    first = sandbox._worker.proc
    assert seen == ["hi!"] and first is not None
    deadline = time.monotonic() + 2.0  # the kernel's signal is not synchronous: give it time
    while time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert first.poll() is None, "the render worker died with the thread that started it"
    assert templates.render(tpl, msgs) == "hi!" and sandbox._worker.proc is first
