"""The recording proxy: asyncio + h11, bytes forwarded as they arrive, one log line per exchange.

Why raw bytes: the agent must get exactly what the server sent (byte-identical, chunk by
chunk) with no added latency, so each piece read from the server is written to the client
*before* it is parsed. h11 parses a copy only to know where the response ends and to hand
the decoded body to ``ResponseFacts``. The request is read whole first (the log keeps it as
sent; agent requests are JSON bodies), then forwarded unchanged on a fresh upstream
connection. Sockets use TCP_NODELAY: with Nagle's algorithm a small SSE chunk written after
another waits for the first one's ACK (up to 40 ms of delayed ACK on Linux).

Faults: an upstream that cannot be reached is a 502 JSON error to the client and a log line;
an upstream that goes away mid-response closes the client's connection (its headers are
already sent) and is logged; a client that disconnects closes the upstream connection, which
makes llama-server cancel the task; a request that is not HTTP is a 400.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11
import orjson

from replayer.core.errors import ReplayerError
from replayer.core.record.traffic_log import Exchange, TrafficLog

READ_SIZE = 65536
MAX_REQUEST = 256 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Upstream:
    host: str
    port: int
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> "Upstream":
        u = urlsplit(url if "://" in url else f"http://{url}")
        if u.scheme != "http":
            raise ReplayerError(f"--upstream must be an http:// URL (llama-server or a router), got {url!r}")
        if not u.hostname:
            raise ReplayerError(f"--upstream has no host: {url!r}")
        try:
            port = u.port or 80
        except ValueError:
            raise ReplayerError(f"--upstream has a bad port: {url!r}") from None
        return cls(u.hostname, port, u.path.rstrip("/"))


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    try:
        n = int(port)
    except ValueError:
        raise ReplayerError(f"--listen must be HOST:PORT, got {text!r}") from None
    if not 0 <= n <= 65535:
        raise ReplayerError(f"--listen port out of range: {n}")
    return host or "127.0.0.1", n


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


_REASONS = {400: "Bad Request", 413: "Payload Too Large", 502: "Bad Gateway"}


class _ClientGone(Exception):
    pass


class RecordingProxy:
    """``start()`` binds and returns the URL; ``serve()`` runs until cancelled; ``close()`` stops."""

    def __init__(self, upstream: Upstream, log: TrafficLog, host: str = "127.0.0.1", port: int = 0,
                 max_request: int = MAX_REQUEST) -> None:
        self.upstream = upstream
        self.log = log
        self.host, self.port = host, port
        self.max_request = max_request
        self.server: asyncio.base_events.Server | None = None
        self.seq = 0
        self.active: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        try:
            self.server = await asyncio.start_server(self._client, self.host, self.port, limit=READ_SIZE)
        except OSError as exc:
            raise ReplayerError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        self.port = self.server.sockets[0].getsockname()[1]
        return self.url

    async def serve(self) -> None:
        assert self.server is not None
        async with self.server:
            await self.server.serve_forever()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self.active):
            t.cancel()
        if self.active:
            await asyncio.gather(*self.active, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    # -- one client connection --------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.active.add(task)
        _nodelay(writer)
        leftover = b""
        try:
            while True:
                conn = h11.Connection(h11.SERVER)
                if leftover:  # (receive_data(b"") would mean EOF)
                    conn.receive_data(leftover)
                got = await self._read_request(conn, reader, writer)
                if got is None:
                    return
                req, body = got
                leftover, keep = await self._exchange(req, body, conn, reader, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, _ClientGone):
            pass
        except asyncio.CancelledError:
            # ``close()``: the connection's own task ends here (asyncio's stream callback asks a
            # cancelled task for its exception and logs a traceback for it)
            pass
        finally:
            if task is not None:
                self.active.discard(task)
            writer.close()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> tuple[h11.Request, bytes] | None:
        req: h11.Request | None = None
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                await self._reply(writer, 400, f"not an HTTP/1.1 request: {exc}")
                return None
            if event is h11.NEED_DATA:
                data = await reader.read(READ_SIZE)
                if not data and req is not None:
                    return None  # the client went away before sending its whole body
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                req = event
                length = _header(event.headers, b"content-length")
                if length and length.isdigit() and int(length) > self.max_request:
                    self._log_error(event, b"", f"request of {length} bytes refused (limit {self.max_request})")
                    await self._reply(writer, 413, f"request body over {self.max_request} bytes")
                    return None
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_request:
                    await self._reply(writer, 413, f"request body over {self.max_request} bytes")
                    return None
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                assert req is not None
                return req, b"".join(parts)
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None

    async def _reply(self, writer: asyncio.StreamWriter, status: int, message: str) -> None:
        """An error the proxy itself answers, in llama-server's error shape (written out whole:
        it also answers requests h11 could not parse, and then the connection closes)."""
        body = orjson.dumps({"error": {"code": status, "message": message, "type": "proxy_error"}})
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode()
        try:
            writer.write(head + body)
            await writer.drain()
        except ConnectionError:
            pass

    def _exchange_of(self, req: h11.Request, body: bytes) -> Exchange:
        self.seq += 1
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in req.headers}
        return Exchange(self.seq, req.method.decode(), req.target.decode("latin-1"), headers, body)

    def _log_error(self, req: h11.Request, body: bytes, error: str) -> None:
        ex = self._exchange_of(req, body)
        ex.error = error
        self.log.write(ex.record())

    async def _exchange(self, req: h11.Request, body: bytes, conn: h11.Connection, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> tuple[bytes, bool]:
        """Forward one request, stream its response back; (bytes the client sent after it, keep-alive)."""
        ex = self._exchange_of(req, body)
        client_close = _wants_close(req)
        leftover = conn.trailing_data[0]
        uconn = h11.Connection(h11.CLIENT)
        target = (self.upstream.prefix + req.target.decode("latin-1")).encode("latin-1") if self.upstream.prefix \
            else req.target
        try:
            out = uconn.send(h11.Request(method=req.method, target=target, headers=req.headers.raw_items(),
                                         http_version=req.http_version))
            out += (uconn.send(h11.Data(data=body)) if body else b"") + uconn.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            ex.error = f"request not forwardable: {exc}"
            await self._reply(writer, 400, ex.error)
            self.log.write(ex.record())
            return b"", False
        loop = asyncio.get_running_loop()
        try:
            utransport, relay = await asyncio.wait_for(loop.create_connection(
                lambda: _Relay(ex, uconn, writer, loop), self.upstream.host, self.upstream.port), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            ex.error = f"upstream {self.upstream.host}:{self.upstream.port} unreachable: {why}"
            ex.response.status = 502
            await self._reply(writer, 502, ex.error)
            self.log.write(ex.record())
            return b"", False
        utransport.write(out)
        watch = asyncio.ensure_future(reader.read(READ_SIZE))
        gone = "client disconnected before the response ended; upstream request cancelled"
        keep = False
        try:
            done, _ = await asyncio.wait({relay.done, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done and not relay.done.done() and not _read_result(watch):
                ex.error = gone
            else:
                keep = await relay.done
                if relay.need_502:
                    await self._reply(writer, 502, ex.error or "upstream failed")
        except _ClientGone:
            ex.error = gone
        except asyncio.CancelledError:
            ex.error = ex.error or "proxy stopped before the response ended"
            raise
        finally:
            if not watch.done():  # a reader left waiting would refuse the next read
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            utransport.close()
            if ex.logged or ex.error:
                self.log.write(ex.record())
        if ex.error == gone:
            return b"", False
        if not watch.cancelled():
            more = _read_result(watch)
            client_close = client_close or not more  # b"": the client closed its side after the request
            leftover += more  # the next request, pipelined
        return leftover, keep and not client_close


class _Relay(asyncio.Protocol):
    """The upstream side of one exchange, on the event loop's callbacks (no task switch per chunk).

    Each piece the server sends is written to the client first, then parsed: h11 reads the
    response head, and the body's framing (chunked, a length, or the connection's close) is
    followed here, a few slices per chunk, to know where the response ends and to hand the
    decoded body to ``ResponseFacts``. ``done`` holds whether the client connection may be kept.
    """

    def __init__(self, ex: Exchange, uconn: h11.Connection, writer: asyncio.StreamWriter,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.ex, self.uconn, self.writer = ex, uconn, writer
        self.client = writer.transport
        self.done: asyncio.Future = loop.create_future()
        self.body: _Framing | None = None
        self.transport: asyncio.Transport | None = None
        self.sent = False
        self.need_502 = False
        self.keep = False
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        if self.client.is_closing():
            return self._fail(_ClientGone())
        if self.ex.t_first_byte is None:
            self.ex.t_first_byte = time.perf_counter()
        self.client.write(data)
        self.sent = True
        try:
            if self.body is None:
                self._head(data)
            else:
                self.body.feed(data)
        except (h11.RemoteProtocolError, ValueError) as exc:
            self.ex.error = f"upstream sent a bad HTTP response: {exc}"
            return self._end(False)
        if self.body is not None and self.body.ended:
            return self._end(self.keep)
        if not self.paused and self.client.get_write_buffer_size() > 4 * READ_SIZE:
            self.paused = True  # a slow client: stop reading the server until the client catches up
            assert self.transport is not None
            self.transport.pause_reading()
            asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        try:
            await self.writer.drain()
        except ConnectionError:
            return self._fail(_ClientGone())
        self.paused = False
        if self.transport is not None and not self.done.done():
            self.transport.resume_reading()

    def _head(self, data: bytes) -> None:
        self.uconn.receive_data(data)
        event = self.uconn.next_event()
        if event is h11.NEED_DATA:
            return
        if not isinstance(event, h11.Response):  # an interim 1xx is not forwarded separately
            raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")
        facts = self.ex.response
        facts.start(event.status_code, _header(event.headers, b"content-type") or "")
        self.keep = not _wants_close(event)
        te = (_header(event.headers, b"transfer-encoding") or "").lower()
        length = _header(event.headers, b"content-length")
        if event.status_code in (204, 304) or self.ex.method == "HEAD":
            self.body = _Framing(facts.feed, 0)
        elif "chunked" in te:
            self.body = _Framing(facts.feed, None)
        elif length is not None and length.strip().isdigit():
            self.body = _Framing(facts.feed, int(length))
        else:
            self.body = _Framing(facts.feed, -1)  # to the connection's close
            self.keep = False
        rest = self.uconn.trailing_data[0]
        if rest:
            self.body.feed(rest)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done.done():
            return
        if self.body is not None and self.body.to_close:
            return self._end(False)
        self.ex.error = self.ex.error or ("upstream closed the connection before the response ended" if self.sent
                                          else "upstream closed the connection without a response")
        if not self.sent:
            self.ex.response.status = 502
            self.need_502 = True
        self._end(False)

    def _end(self, keep: bool) -> None:
        self.ex.response.finish()
        if not self.done.done():
            self.done.set_result(keep)

    def _fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


class _Framing:
    """Where a response body ends: chunked (``length`` None), a length, or the close (-1).
    Decoded bytes go to ``sink``; a chunk header costs one ``find`` and one ``int``, and a piece
    that is one whole chunk (what a streaming server writes per token) takes one slice."""

    def __init__(self, sink, length: int | None) -> None:
        self.sink = sink
        self.chunked = length is None
        self.to_close = length == -1
        self.left = 0 if self.chunked else length
        self.ended = length == 0
        self.state = "size"  # size | data | crlf | trailer
        self.buf = b""

    def feed(self, data: bytes) -> None:
        if not self.chunked:
            if self.to_close:
                self.sink(data)
            else:
                take = data[:self.left]
                self.left -= len(take)
                self.sink(take)
                self.ended = self.left <= 0
            return
        if self.state == "size" and not self.buf:  # the usual piece: exactly one whole chunk (a token)
            j = data.find(b"\r\n", 0, 20)
            if j > 0 and data.endswith(b"\r\n"):
                try:
                    size = int(data[:j], 16)  # (no extension: ";" makes int() fail, the loop reads it)
                except ValueError:
                    size = -1
                if size > 0 and j + 2 + size + 2 == len(data):
                    self.sink(data[j + 2:-2])
                    return
        buf = self.buf + data if self.buf else data
        i, n = 0, len(buf)
        while i < n and not self.ended:
            if self.state == "data":
                take = min(self.left, n - i)
                self.sink(buf[i:i + take])
                i += take
                self.left -= take
                if not self.left:
                    self.state = "crlf"
            elif self.state == "crlf":
                if n - i < 2:
                    break
                i += 2
                self.state = "size"
            else:
                j = buf.find(b"\r\n", i)
                if j < 0:
                    break
                if self.state == "trailer":
                    self.ended = j == i
                else:
                    size = int(buf[i:j].split(b";", 1)[0], 16)
                    self.left = size
                    self.state = "data" if size else "trailer"
                i = j + 2
        self.buf = buf[i:]


def _read_result(task: asyncio.Future) -> bytes:
    """What a finished read of the client returned (b"" when it failed: the client is gone)."""
    return b"" if task.exception() is not None else task.result()


def _header(headers: Any, name: bytes) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def _wants_close(event: Any) -> bool:
    value = (_header(event.headers, b"connection") or "").lower()
    return "close" in value or event.http_version == b"1.0"
