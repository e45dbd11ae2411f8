"""Running the proxy from a command line: bind, print where, serve until Ctrl-C, report the log."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable

from replayer.core.errors import ReplayerError
from replayer.core.record.proxy import RecordingProxy, Upstream, parse_listen
from replayer.core.record.traffic_log import TrafficLog

DEFAULT_LISTEN = "127.0.0.1:8081"


def default_out() -> Path:
    return Path(f"replayer-traffic-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")


def open_log(path: Path, on_write: Callable[[dict[str, Any]], None] | None = None) -> TrafficLog:
    try:
        return TrafficLog(path, on_write)
    except OSError as exc:
        raise ReplayerError(f"cannot write the traffic log {path}: {exc.strerror or exc}") from None


def record(upstream: str, listen: str = DEFAULT_LISTEN, out: Path | None = None,
           on_ready: Callable[[str, Path], None] | None = None) -> int:
    """Serve until interrupted; returns the number of lines logged."""
    up = Upstream.parse(upstream)
    host, port = parse_listen(listen)
    path = out or default_out()
    existed = path.exists()
    log = open_log(path)
    proxy = RecordingProxy(up, log, host, port)
    listening = False

    async def main() -> None:
        nonlocal listening
        url = await proxy.start()
        listening = True
        if on_ready is not None:
            on_ready(url, path)
        try:
            await proxy.serve()
        finally:
            await proxy.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        log.close()
        if not listening and not existed:  # a proxy that never listened (a port in use) leaves no empty log
            path.unlink(missing_ok=True)
    return log.lines
