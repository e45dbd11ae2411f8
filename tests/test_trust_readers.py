"""Bounded session readers (issue 24): line length, nesting depth, byte-order marks, FIFOs."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from conftest import FIXTURES, REPO
from replayer.core.errors import ImportFailed
from replayer.core.session import load_session
from replayer.core.session.reader import MAX_LINE, LineTooLong

PI = FIXTURES / "pi" / "small-v3.jsonl"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


def test_2gb_line_without_newline_is_refused_naming_line_and_size(tmp_path):
    """A valid head, then a 2 GB line (sparse: no disk used). Memory and time are measured in
    benchmarks/memory.py; here only the error."""
    f = tmp_path / "huge.jsonl"
    head = PI.read_bytes()
    f.write_bytes(head)
    with open(f, "r+b") as fh:
        fh.truncate(len(head) + (2 << 30))
    n_lines = head.count(b"\n")
    with pytest.raises(LineTooLong) as err:
        load_session(f)
    msg = str(err.value)
    assert f"line {n_lines + 1} is longer than {MAX_LINE >> 20} MB" in msg
    r = _cli("inspect", str(f))
    assert r.returncode == 2 and "Traceback" not in r.stderr and f"line {n_lines + 1}" in r.stderr
    assert f.stat().st_size == len(head) + (2 << 30)


def _pi_with(tmp_path, extra: bytes, name="s.jsonl"):
    f = tmp_path / name
    f.write_bytes(PI.read_bytes() + extra)
    return f


def test_deep_nesting_line_over_8mb_is_a_skipped_line_not_a_traceback(tmp_path):
    f = _pi_with(tmp_path, b'{"type":"custom","x":' + b"[" * (9 << 20) + b"\n")
    s = load_session(f)
    assert s.stats.bad_lines == 1 and any("did not parse" in w for w in s.warnings)
    r = _cli("inspect", str(f))
    assert r.returncode == 0 and "Traceback" not in r.stderr


def test_deep_but_valid_record_is_read(tmp_path):
    """orjson parses 1,000 levels; the blob walk must not recurse into Python's limit."""
    lines = PI.read_bytes().rstrip(b"\n").split(b"\n")
    lines[-1] = lines[-1][:-1] + b',"x":' + b"[" * 1000 + b"]" * 1000 + b"}"
    f = tmp_path / "deep.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    s = load_session(f)
    assert s.stats.bad_lines == 0 and len(s.messages) == len(load_session(PI).messages)


def test_utf8_bom_is_accepted(tmp_path):
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + PI.read_bytes())
    s = load_session(f)
    assert s.format == "pi" and s.stats.bad_lines == 0
    assert len(s.messages) == len(load_session(PI).messages)


def test_utf8_bom_whole_document(tmp_path):
    f = tmp_path / "bom.json"
    src = FIXTURES / "openai" / "request.json"
    f.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    assert load_session(f).format == "openai"


def test_fifo_is_not_a_regular_file(tmp_path):
    f = tmp_path / "pipe.jsonl"
    os.mkfifo(f)
    with pytest.raises(ImportFailed, match="FIFO, socket or device, not a regular file"):
        load_session(f)


def test_device_is_not_a_regular_file():
    with pytest.raises(ImportFailed, match="not a regular file"):
        load_session("/dev/zero")


def test_one_bad_field_leaves_out_its_record_by_name_not_the_session(tmp_path):
    """It was refused whole with "field name: Input should be a valid string"; now the message
    holding the bad tool call is left out and the caveat names it."""
    doc = orjson.loads((FIXTURES / "openai" / "agent-45-rounds.json").read_bytes())
    whole = load_session(FIXTURES / "openai" / "agent-45-rounds.json")
    doc["messages"][2]["tool_calls"][0]["function"]["name"] = 5
    f = tmp_path / "bad.json"
    f.write_bytes(orjson.dumps(doc))
    s = load_session(f)
    assert 0 < len(s.messages) <= len(whole.messages)  # its scalars (role, text) may stay
    assert s.incomplete and "1 record(s) had a field that could not be read (messages[2] (" in s.incomplete


def test_a_small_file_is_read_without_allocating_the_readers_limit():
    """``read(limit + 1)`` allocated the limit up front: 256 MB of address space for a 1 KB
    aider history, a ``MemoryError`` traceback under an address-space limit a pi session of
    the same size stays well inside."""
    def limited():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (230 << 20, 230 << 20))  # inspect peaks near 170 MB

    for f in (FIXTURES / "aider" / ".aider.chat.history.md", PI):
        r = subprocess.run([sys.executable, "-m", "replayer.cli", "inspect", str(f)], capture_output=True,
                           text=True, cwd=REPO, timeout=120, preexec_fn=limited)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-1500:]


def test_a_file_that_reports_no_size_is_read_whole_and_still_bounded(tmp_path):
    from replayer.core.errors import ReplayerError
    from replayer.core.textfile import read_bytes

    assert read_bytes("/proc/self/status", "status").startswith(b"Name:")  # st_size 0, content all the same
    f = tmp_path / "three.bin"
    f.write_bytes(b"a" * (3 << 20))
    assert len(read_bytes(f, "file", 3 << 20)) == 3 << 20
    with pytest.raises(ReplayerError, match="too large"):
        read_bytes(f, "file", (3 << 20) - 1)


def _dense_body(n: int) -> bytes:
    """An OpenAI body of ``n`` short messages: object-dense JSON, the costliest kind per byte."""
    msgs = [{"role": "system", "content": "s"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": f"m{i}"}]}
        for i in range(n)]
    return orjson.dumps({"model": "m", "messages": msgs}, option=orjson.OPT_INDENT_2)


def test_an_object_dense_document_is_parsed_without_orjsons_buffer():
    """orjson asks for a value buffer of 10-35x its input before it parses (the 78 KB OpenAI
    fixture peaked at 1.1 MB for 157 KB of objects); a text over 32 KB is read by ``json``,
    whose peak is the objects it returns and the decoded text. Measured as the traced heap
    (tracemalloc), which counts every byte asked for."""
    import tracemalloc

    from replayer.core.session.reader import loads

    data = _dense_body(600)
    assert len(data) > 64 << 10

    def peak_and_kept(parse):
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        doc = parse(data)
        kept, peak = (x - base for x in tracemalloc.get_traced_memory())
        return doc, peak, kept

    tracemalloc.start()
    try:
        want, orjson_peak, _ = peak_and_kept(orjson.loads)
        del want
        doc, peak, kept = peak_and_kept(loads)
    finally:
        tracemalloc.stop()
    assert doc == orjson.loads(data)
    assert peak <= kept + 2 * len(data), (peak, kept, len(data))  # the objects, the text and no buffer
    assert 2 * peak < orjson_peak, (peak, orjson_peak)


def test_one_emoji_does_not_make_the_decoded_text_four_bytes_a_character():
    """A character past U+FFFF made the ``str`` of a whole 756 KB Claude Code log 3 MB; it is
    read as its escape, so the text stays one byte a character (ASCII here)."""
    import tracemalloc

    from replayer.core.session.reader import loads

    data = orjson.dumps({"messages": [{"role": "user", "content": "x" * 300_000}, {"role": "user", "content": "\U0001f600"}]})
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        doc = loads(data)
        kept, peak = (x - base for x in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert doc == orjson.loads(data)
    assert peak <= kept + 2 * len(data) + (64 << 10), (peak, kept, len(data))  # not the 4-byte text


def _shape(value):
    """A value's nesting depth and innermost item, without recursion (the deep case)."""
    depth = 0
    while isinstance(value, list) and value:
        value, depth = value[0], depth + 1
    return depth, value if not isinstance(value, dict) else sorted(value.items())


@pytest.mark.parametrize("body,ok", [
    (b'"\\ud800"', False), (b'"\\udc00"', False), (b'"\\ud83d\\ude00"', True), (b'[NaN]', False), (b'[Infinity]', False),
    (b'[1e999]', False), (b'[1.5e300]', True), (b'{"a": "\\\\ud800"}', True), (b'[1]x', False), (b'"\xff"', False),
    (b'[' * 1010 + b']' * 1010, True), (b'[' * 5000, False), ('["a\U0001f600b", {"\U0010ffff": 1}]'.encode(), True),
    (b'["\xf4\x90\x80\x80"]', False), (b'["\xf0\x9f\x98"]', False)])
def test_large_texts_are_read_and_refused_as_orjson_reads_and_refuses_them(body, ok):
    from replayer.core.session.reader import loads

    pad = b" " * (40 << 10)  # past the size where json reads instead of orjson
    for data in (body, body + pad):
        if ok:
            assert _shape(loads(data)) == _shape(orjson.loads(body))
        else:
            with pytest.raises(orjson.JSONDecodeError):
                loads(data)
