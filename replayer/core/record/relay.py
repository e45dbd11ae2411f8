"""The upstream side of the recording proxy: its keep-alive connections (``Pool``), and the
relay that copies one answer to the client as it arrives (``Relay``, ``Framing``).

Why a pool: an agent sends its requests one after another, so a connection the previous request
left open saves each one a TCP handshake (and llama-server's accept and thread hand-off) before
its first byte. A pooled connection the server closed in the meantime (its keep-alive timeout) is
noticed by the event loop while it sits idle; one closed in the instant it was taken makes the
request's answer end before its first byte (``STALE``), and the proxy sends it again once on a
new connection. Only a connection whose answer ended cleanly goes back: a cut one is closed,
which is what makes llama-server cancel the task of a client that left.

What an idle pooled connection costs the server: cpp-httplib serves a connection on one thread
until it closes, but llama-server's pool has ``max(n_parallel + 4, cores - 1)`` fixed threads and
up to 1,024 more made on demand (tools/server/server-http.cpp:292-303 in 9859, :288-299 in
10001), so the ``POOL_SIZE`` idle ones starve no other client; the server closes one after 5 s idle
or 100 requests (``CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND``, ``…_MAX_COUNT``, vendor/cpp-httplib),
the latter with ``connection: close``, which the proxy honours by not pooling it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import h11

from replayer.core.record.traffic_log import Exchange

READ_SIZE = 65536
CONNECT_TIMEOUT_S = 10.0
POOL_SIZE = 4  # idle upstream connections kept: an agent, its side requests and a sub-agent or two


class ClientGone(Exception):
    """The client went away while its answer was being relayed."""


STALE = object()  # ``Relay.done``'s result when a reused connection closed before any answer


class UpstreamConn(asyncio.Protocol):
    """One TCP connection to the upstream, kept between exchanges: the event loop's callbacks go
    to the exchange using it (its ``Relay``), or, while it sits idle in the pool, note that
    the server closed it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.relay: Relay | None = None
        self.closed = False

    def begin(self, ex: Exchange, uconn: h11.Connection, writer: asyncio.StreamWriter, reused: bool) -> "Relay":
        assert self.transport is not None
        self.relay = Relay(ex, uconn, writer, asyncio.get_running_loop(), self, reused)
        return self.relay

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.relay is not None:
            self.relay.data_received(data)
        elif self.transport is not None:  # bytes nobody asked for: the connection is not reusable
            self.transport.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.relay is not None:
            self.relay.connection_lost(exc)

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()


class Pool:
    """Idle keep-alive connections to the upstream, the most recently used first (the least
    likely to have met the server's keep-alive timeout)."""

    def __init__(self, host: str, port: int, size: int = POOL_SIZE) -> None:
        self.host, self.port = host, port
        self.size = size
        self.idle: list[UpstreamConn] = []

    async def get(self, fresh: bool = False) -> tuple[UpstreamConn, bool]:
        """(a connection, whether it is a reused one); ``OSError``/``TimeoutError`` if none can be made."""
        while self.idle and not fresh:
            conn = self.idle.pop()
            if conn.usable():
                return conn, True
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_connection(UpstreamConn, self.host, self.port),
                                         CONNECT_TIMEOUT_S)
        return conn, False

    def put(self, conn: UpstreamConn, reusable: bool) -> None:
        conn.relay = None
        if reusable and conn.usable() and len(self.idle) < self.size:
            self.idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()

    def close(self) -> None:
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()


class Relay:
    """The upstream side of one exchange, on the event loop's callbacks (no task switch per chunk).

    Each piece the server sends is written to the client first, then parsed: h11 reads the
    response head, and the body's framing (chunked, a length, or the connection's close) is
    followed here, a few slices per chunk, to know where the response ends and to hand the
    decoded body to ``ResponseFacts``. ``done`` holds whether the client connection may be kept.
    """

    def __init__(self, ex: Exchange, uconn: h11.Connection, writer: asyncio.StreamWriter,
                 loop: asyncio.AbstractEventLoop, conn: "UpstreamConn", reused: bool = False) -> None:
        self.ex, self.uconn, self.writer = ex, uconn, writer
        self.client = writer.transport
        self.done: asyncio.Future = loop.create_future()
        self.body: Framing | None = None
        self.conn = conn  # the upstream connection it reads (back to the pool once the answer ended)
        self.transport: asyncio.Transport | None = conn.transport
        self.reused = reused
        self.sent = False
        self.need_502 = False
        self.keep = False
        self.paused = False

    def idle(self) -> bool:
        """The response ended and nothing is held back: the connection can serve the next one."""
        return self.done.done() and not self.paused and self.body is not None and self.body.ended and not self.body.buf

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        if self.client.is_closing():
            return self._fail(ClientGone())
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
            return self._fail(ClientGone())
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
        facts.start(event.status_code, header(event.headers, b"content-type") or "")
        self.keep = not wants_close(event)
        te = (header(event.headers, b"transfer-encoding") or "").lower()
        length = header(event.headers, b"content-length")
        if event.status_code in (204, 304) or self.ex.method == "HEAD":
            self.body = Framing(facts.feed, 0)
        elif "chunked" in te:
            self.body = Framing(facts.feed, None)
        elif length is not None and length.strip().isdigit():
            self.body = Framing(facts.feed, int(length))
        else:
            self.body = Framing(facts.feed, -1)  # to the connection's close
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
        if self.reused and not self.sent:  # closed by the server before it read this request: not an answer
            return self.done.set_result(STALE)
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


class Framing:
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


def header(headers: Any, name: bytes) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def wants_close(event: Any) -> bool:
    value = (header(event.headers, b"connection") or "").lower()
    return "close" in value or event.http_version == b"1.0"
