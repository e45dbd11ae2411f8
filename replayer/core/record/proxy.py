"""The recording proxy: asyncio + h11, bytes forwarded as they arrive, one log line per exchange.

Why raw bytes: the agent must get exactly what the server sent (byte-identical, chunk by
chunk) with no added latency, so each piece read from the server is written to the client
*before* it is parsed. h11 parses a copy only to know where the response ends and to hand
the decoded body to ``ResponseFacts``. The request is read whole first (the log keeps it as
sent; agent requests are JSON bodies), then forwarded unchanged on an upstream connection
from a small keep-alive pool (``relay.Pool``: no TCP handshake before each request's first
byte; a request whose reused connection the server had just closed is sent again once, on a
new one). Sockets use TCP_NODELAY: with Nagle's algorithm a small SSE chunk written after another waits
for the first one's ACK (up to 40 ms of delayed ACK on Linux).

Faults: an upstream that cannot be reached is a 502 JSON error to the client and a log line;
an upstream that goes away mid-response closes the client's connection (its headers are
already sent) and is logged; a client that disconnects closes the upstream connection, which
makes llama-server cancel the task; a request that is not HTTP is a 400.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11
import orjson

from replayer.core.errors import ReplayerError
from replayer.core.record.relay import READ_SIZE, STALE, ClientGone, Pool, Relay, header, wants_close
from replayer.core.record.traffic_log import Exchange, TrafficLog

MAX_REQUEST = 256 * 1024 * 1024


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
GONE = "client disconnected before the response ended; upstream request cancelled"


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
        self.pool = Pool(upstream.host, upstream.port)

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
        self.pool.close()
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
        except (ConnectionError, asyncio.IncompleteReadError, ClientGone):
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
                length = header(event.headers, b"content-length")
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
        client_close = wants_close(req)
        leftover = conn.trailing_data[0]
        uconn = h11.Connection(h11.CLIENT)
        try:
            out = self._request_bytes(uconn, req, body)
        except h11.LocalProtocolError as exc:
            ex.error = f"request not forwardable: {exc}"
            await self._reply(writer, 400, ex.error)
            self.log.write(ex.record())
            return b"", False
        try:
            up, reused = await self.pool.get()
        except (OSError, asyncio.TimeoutError) as exc:
            self._unreachable(ex, exc)
            await self._reply(writer, 502, ex.error or "")
            self.log.write(ex.record())
            return b"", False
        relay = up.begin(ex, uconn, writer, reused)
        up.transport.write(out)
        watch = asyncio.ensure_future(reader.read(READ_SIZE))
        keep: object = False
        try:
            relay, keep = await self._answer(ex, relay, watch, uconn, writer, out)
            if relay.need_502:
                await self._reply(writer, 502, ex.error or "upstream failed")
        except ClientGone:
            ex.error = GONE
        except asyncio.CancelledError:
            ex.error = ex.error or "proxy stopped before the response ended"
            raise
        finally:
            if not watch.done():  # a reader left waiting would refuse the next read
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
            # only a connection whose answer ended cleanly goes back to the pool; a cut one is
            # closed (that is what makes llama-server cancel the task of a client that left)
            self.pool.put(relay.conn, reusable=keep is True and not ex.error and relay.idle())
            if ex.logged or ex.error:
                self.log.write(ex.record())
        if ex.error == GONE:
            return b"", False
        if not watch.cancelled():
            more = _read_result(watch)
            client_close = client_close or not more  # b"": the client closed its side after the request
            leftover += more  # the next request, pipelined
        return leftover, keep is True and not client_close

    def _request_bytes(self, uconn: h11.Connection, req: h11.Request, body: bytes) -> bytes:
        """The request as it goes upstream: unchanged but for the upstream URL's path prefix."""
        target = (self.upstream.prefix + req.target.decode("latin-1")).encode("latin-1") if self.upstream.prefix \
            else req.target
        out = uconn.send(h11.Request(method=req.method, target=target, headers=req.headers.raw_items(),
                                     http_version=req.http_version))
        return out + (uconn.send(h11.Data(data=body)) if body else b"") + uconn.send(h11.EndOfMessage())

    async def _answer(self, ex: Exchange, relay: Relay, watch: asyncio.Future, uconn: h11.Connection,
                      writer: asyncio.StreamWriter, out: bytes) -> tuple[Relay, object]:
        """Wait for the answer's end or the client's leaving: (the relay that carried it, whether
        the upstream connection may be kept). A reused connection closed under the request before
        any answer (``STALE``) is replaced once by a new one, the request sent again."""
        while True:
            done, _ = await asyncio.wait({relay.done, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done and not relay.done.done() and not _read_result(watch):
                ex.error = GONE
                return relay, False
            keep = await relay.done
            if keep is not STALE:
                return relay, keep
            try:
                up, reused = await self.pool.get(fresh=True)
            except (OSError, asyncio.TimeoutError) as exc:
                self._unreachable(ex, exc)
                relay.need_502 = True
                return relay, False
            relay = up.begin(ex, uconn, writer, reused)
            up.transport.write(out)

    def _unreachable(self, ex: Exchange, exc: BaseException) -> None:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        ex.error = f"upstream {self.upstream.host}:{self.upstream.port} unreachable: {why}"
        ex.response.status = 502


def _read_result(task: asyncio.Future) -> bytes:
    """What a finished read of the client returned (b"" when it failed: the client is gone)."""
    return b"" if task.exception() is not None else task.result()
