"""The recording proxy against scripted in-process upstreams: forwarding, the log, and the faults
(upstream down, cut streams, client disconnects, malformed bodies, non-JSON, 10 MB requests)."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time

import httpx
import pytest

from replayer.cli import main
from helpers import EXIT_S, read_line, reaped
from tests.record_fakes import TIMINGS, proxy_to, upstream

CHAT = {"model": "m", "messages": [{"role": "system", "content": "You are a coding agent."},
                                   {"role": "user", "content": "hello"}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_plain_request_is_forwarded_unchanged_and_logged_with_the_servers_timings(tmp_path):
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        raw = json.dumps(CHAT, indent=1).encode()
        direct = httpx.post(f"{url}/v1/chat/completions", content=raw)
        via = httpx.post(f"{p.url}/v1/chat/completions", content=raw)
        [line] = p.wait_lines(1)
    assert via.status_code == 200 and via.content == direct.content
    assert script.bodies == [raw, raw]
    assert line["endpoint"] == "/v1/chat/completions" and line["status"] == 200
    assert line["body"] == CHAT and line["body_bytes"] == len(raw)
    assert line["body_sha256"] == hashlib.sha256(raw).hexdigest()
    assert line["timings"] == TIMINGS and line["id_slot"] == 1 and line["error"] is None


def test_requests_one_after_another_reuse_one_upstream_connection(tmp_path):
    """Each client request comes on a connection of its own; the proxy forwards them all on the
    one upstream connection the first one opened (keep-alive), streamed or not."""
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        for stream in (False, True, False, True):
            assert httpx.post(f"{p.url}/v1/chat/completions", json={**CHAT, "stream": stream}).status_code == 200
        lines = p.wait_lines(4)
    assert len(script.peers) == 4 and len(set(script.peers)) == 1
    assert [x["status"] for x in lines] == [200] * 4 and not any(x["error"] for x in lines)


def test_a_pooled_connection_the_upstream_closed_is_not_an_error(tmp_path):
    """The server closes a kept connection (its keep-alive timeout) — after an answer, or on the
    next request before answering it: the request goes out again on a new connection, the
    client gets the server's answer, and the log has no error."""
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        first = httpx.post(f"{p.url}/v1/chat/completions", json={**CHAT, "fault": "close-after"})
        second = httpx.post(f"{p.url}/v1/chat/completions", json=CHAT)
        script.drop_reused = True
        third = httpx.post(f"{p.url}/v1/chat/completions", json=CHAT)
        lines = p.wait_lines(3)
    assert [r.status_code for r in (first, second, third)] == [200, 200, 200]
    assert third.json()["timings"] == TIMINGS
    assert len(script.peers) == 4  # the third was sent twice: dropped on the kept connection, answered on a new one
    assert script.peers[0] != script.peers[1] == script.peers[2] != script.peers[3]
    assert [x["status"] for x in lines] == [200] * 3 and not any(x["error"] for x in lines)


def test_a_stream_passes_chunk_by_chunk_not_buffered(tmp_path):
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        with httpx.stream("POST", f"{p.url}/v1/chat/completions", json={**CHAT, "stream": True, "fault": "held"}) as r:
            it = r.iter_raw()
            first = next(it)  # the upstream holds the rest until released: it can only come unbuffered
            assert b"t0" in first and not script.release.is_set()
            script.release.set()
            rest = b"".join(it)
        [line] = p.wait_lines(1)
    assert rest.endswith(b"data: [DONE]\n\n")
    assert line["stream"] is True and line["response_events"] == 22


def test_a_streams_final_chunk_gives_the_timings_and_slot(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        direct = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "stream": True}).content
        via = httpx.post(f"{p.url}/v1/chat/completions", json={**CHAT, "stream": True}).content
        [line] = p.wait_lines(1)
    assert via == direct
    assert line["timings"] == TIMINGS and line["id_slot"] == 0


def test_a_stream_longer_than_what_is_kept_still_gives_its_timings_and_every_event(tmp_path, monkeypatch):
    """The proxy keeps a stream's chunks as they pass and reads them at its end; past
    ``RESPONSE_KEEP`` bytes it keeps only the tail (where the final event is), counting the rest."""
    from replayer.core.record import traffic_log

    monkeypatch.setattr(traffic_log, "RESPONSE_KEEP", 1000)  # ~25 of the 400 token chunks
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        script.n_chunks = 400
        direct = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "stream": True}).content
        via = httpx.post(f"{p.url}/v1/chat/completions", json={**CHAT, "stream": True}).content
        [line] = p.wait_lines(1)
    assert via == direct and len(via) > 10_000
    assert line["timings"] == TIMINGS and line["id_slot"] == 0
    assert line["response_events"] == 402 and line["response_bytes"] == len(via)


def test_a_responses_stream_nests_its_timings_in_the_completed_event(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        httpx.post(f"{p.url}/v1/responses", json={"model": "m", "input": "hi", "stream": True})
        [line] = p.wait_lines(1)
    assert line["endpoint"] == "/v1/responses" and line["timings"] == TIMINGS
    assert line["usage"] == {"input_tokens": 5}


def test_header_secrets_never_reach_the_log(tmp_path):
    secret = "sk-ant-" + "x" * 40
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        httpx.post(f"{p.url}/v1/messages", json=CHAT, headers={"Authorization": f"Bearer {secret}",
                                                               "x-api-key": secret, "Cookie": f"s={secret}",
                                                               "anthropic-version": "2023-06-01"})
        p.wait_lines(1)
    assert script.headers[0]["x-api-key"] == secret  # forwarded unchanged
    text = (tmp_path / "log.jsonl").read_text()
    assert secret not in text
    assert json.loads(text)["headers"]["anthropic-version"] == "2023-06-01"


def test_other_endpoints_are_forwarded_but_not_logged(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        assert httpx.get(f"{p.url}/health").json() == {"status": "ok"}
        assert httpx.get(f"{p.url}/nope").status_code == 404
        httpx.post(f"{p.url}/completion", json={"prompt": "x"})
        lines = p.wait_lines(1)
    assert [line["endpoint"] for line in lines] == ["/completion"]


def test_upstream_down_is_a_502_to_the_client_and_a_log_line(tmp_path):
    port = _free_port()
    with proxy_to(f"http://127.0.0.1:{port}", tmp_path / "log.jsonl") as p:
        r = httpx.post(f"{p.url}/v1/chat/completions", json=CHAT)
        r2 = httpx.get(f"{p.url}/health")  # the proxy is still up, and logs this failure too
        lines = p.wait_lines(2)
    assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]
    assert r2.status_code == 502
    assert lines[0]["status"] == 502 and "unreachable" in lines[0]["error"] and lines[0]["body"] == CHAT
    assert lines[1]["endpoint"] == "/health"


def test_an_upstream_that_cuts_a_stream_is_logged_and_the_proxy_stays_up(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"{p.url}/v1/chat/completions", json={**CHAT, "stream": True, "fault": "cut"})
        ok = httpx.post(f"{p.url}/v1/chat/completions", json=CHAT)
        lines = p.wait_lines(2)
    assert ok.status_code == 200
    assert "before the response ended" in lines[0]["error"] and lines[1]["error"] is None


def test_a_client_that_disconnects_mid_stream_cancels_upstream(tmp_path):
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        script.n_chunks = 400
        with httpx.stream("POST", f"{p.url}/v1/chat/completions", json={**CHAT, "stream": True, "fault": "slow"}) as r:
            next(r.iter_raw())
        # the proxy closed its upstream connection: the upstream's next writes fail
        assert script.client_gone.wait(5)
        [line] = p.wait_lines(1)
        assert httpx.get(f"{p.url}/health").status_code == 200
    assert "client disconnected" in line["error"]


def test_a_malformed_body_is_forwarded_as_is_and_the_servers_error_logged(tmp_path):
    raw = b'{"messages": [ {"role": "user", "content": "unterminated'
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl") as p:
        r = httpx.post(f"{p.url}/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        [line] = p.wait_lines(1)
    assert script.bodies == [raw]
    assert r.status_code == 500 and "parse error" in r.json()["error"]["message"]
    assert line["body"] is None and line["body_text"] == raw.decode()
    assert line["status"] == 500 and "parse error" in line["error"]


def test_a_non_json_response_is_forwarded_and_logged_as_such(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        r = httpx.post(f"{p.url}/v1/chat/completions", json={**CHAT, "fault": "html"})
        [line] = p.wait_lines(1)
    assert r.status_code == 502 and r.text == "<html><body>Bad gateway</body></html>"
    assert line["status"] == 502 and "not JSON" in line["error"] and "Bad gateway" in line["error"]


def test_a_10_mb_request_is_forwarded_whole_and_logged(tmp_path):
    big = {**CHAT, "messages": CHAT["messages"] + [{"role": "user", "content": "x" * (10 * 1024 * 1024)}]}
    raw = json.dumps(big).encode()
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        r = httpx.post(f"{p.url}/echo-size", content=raw, timeout=30)
        r2 = httpx.post(f"{p.url}/v1/chat/completions", content=raw, timeout=30)
        [line] = p.wait_lines(1)
    assert r.json()["bytes"] == len(raw) and r.json()["sha256"] == hashlib.sha256(raw).hexdigest()
    assert r2.status_code == 200
    assert line["body_bytes"] == len(raw) and line["body"] == big


def test_a_request_over_the_limit_is_refused_and_logged(tmp_path):
    with upstream() as (url, script), proxy_to(url, tmp_path / "log.jsonl", max_request=1000) as p:
        r = httpx.post(f"{p.url}/v1/chat/completions", content=b"x" * 2000)
        [line] = p.wait_lines(1)
        assert httpx.get(f"{p.url}/health").status_code == 200
    assert r.status_code == 413 and not script.bodies
    assert "refused" in line["error"]


def test_bytes_that_are_not_http_get_a_400_and_the_proxy_stays_up(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        port = int(p.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"\x16\x03\x01 this is TLS, not HTTP\r\n\r\n")
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 400")
        assert httpx.get(f"{p.url}/health").status_code == 200


def test_keep_alive_requests_on_one_connection_are_logged_in_order(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        with httpx.Client() as c:
            for i in range(5):
                body = {**CHAT, "messages": CHAT["messages"] + [{"role": "user", "content": f"turn {i}"}]}
                assert c.post(f"{p.url}/v1/chat/completions", json={**body, "stream": bool(i % 2)}).status_code == 200
        lines = p.wait_lines(5)
    assert [line["body"]["messages"][-1]["content"] for line in lines] == [f"turn {i}" for i in range(5)]
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)


def test_concurrent_clients_lose_no_line(tmp_path):
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        def client(k: int) -> None:
            with httpx.Client() as c:
                for i in range(5):
                    c.post(f"{p.url}/v1/chat/completions", json={**CHAT, "stream": i % 2 == 0, "tag": f"{k}-{i}"})
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lines = p.wait_lines(40)
    assert sorted(line["body"]["tag"] for line in lines) == sorted(f"{k}-{i}" for k in range(8) for i in range(5))
    assert all(line["timings"] == TIMINGS for line in lines)


def test_the_thread_is_told_from_the_session_key_or_the_system_prompt(tmp_path):
    side = {**CHAT, "messages": [{"role": "system", "content": "Write a title."}, CHAT["messages"][1]]}
    with upstream() as (url, _), proxy_to(url, tmp_path / "log.jsonl") as p:
        for body in (CHAT, side, CHAT, {**side, "prompt_cache_key": "abc"}):
            httpx.post(f"{p.url}/v1/chat/completions", json=body)
        httpx.post(f"{p.url}/v1/messages", json={"model": "m", "system": "You are a coding agent.",
                                                  "messages": [{"role": "user", "content": "x"}]})
        lines = p.wait_lines(5)
    t = [line["thread"] for line in lines]
    assert t[0] == t[2] != t[1] and t[3] not in (t[0], t[1]) and t[4] == t[0]
    assert lines[3]["thread_from"] == "prompt_cache_key" and lines[0]["thread_from"] == "system prompt"


@pytest.mark.parametrize("argv, message", [
    (["record", "--upstream", "https://example.org"], "http:// URL"),
    (["record", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:http"], "HOST:PORT"),
])
def test_record_bad_arguments_are_one_line_errors(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path / "l.jsonl")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_record_on_a_port_in_use_is_one_line_and_leaves_no_log(capsys, tmp_path):
    """A port another process holds: one error line, exit 2, and no empty traffic log left —
    while a log that was there before is kept as it was."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        new, old = tmp_path / "new.jsonl", tmp_path / "old.jsonl"
        old.write_text('{"kept": true}\n')
        for out in (new, old):
            assert main(["record", "--upstream", "http://127.0.0.1:1", "--listen", f"127.0.0.1:{port}",
                         "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert "cannot listen on" in err and err.count("\n") == 1
    assert not new.exists() and old.read_text() == '{"kept": true}\n'


def test_record_runs_until_interrupted_and_reports_its_lines(tmp_path):
    import signal
    import subprocess
    import sys

    out = tmp_path / "traffic.jsonl"
    with upstream() as (url, _):
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "replayer.cli", "record", "--upstream", url, "--listen",
                                 f"127.0.0.1:{port}", "--out", str(out)], stderr=subprocess.PIPE, text=True)
        with reaped(proc):
            ready = read_line(proc.stderr)
            assert f"http://127.0.0.1:{port} -> {url}" in ready
            assert httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT).status_code == 200
            proc.send_signal(signal.SIGINT)
            assert proc.wait(EXIT_S) == 0
            assert "1 line(s) logged" in proc.stderr.read()
    assert json.loads(out.read_text())["body"] == CHAT
