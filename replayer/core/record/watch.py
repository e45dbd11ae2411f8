"""``replayer watch``'s engine room, Textual-free: the recording proxy on a thread of its own, and
the prediction of each request on another, the rows handed over through a queue.

Why two threads: the proxy forwards the agent's stream chunk by chunk, so its event loop must
never wait for a repaint or a prediction (a layout asks the upstream server for
``/apply-template`` and ``/tokenize``: blocking HTTP). The log calls ``on_write`` on the proxy's
loop once a line is on disk; that only queues the record. The predictor thread turns each into
a ``WatchRow`` (``predict.Predictor``) and appends it to ``rows``, which the app drains on its own
timer — the same hand-over as a replay's runs (workers append, the screen drains).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections import deque
from pathlib import Path
from typing import Any

from replayer.core.prepare import ReplayConfig
from replayer.core.record.predict import Predictor, ServerPrompts, Side, Totals, WatchRow
from replayer.core.record.proxy import RecordingProxy, Upstream, parse_listen
from replayer.core.record.run import DEFAULT_LISTEN, default_out, open_log

_STOP = object()


class Watch:
    """``start()`` binds and returns the proxy's URL; ``drain()`` gives the rows predicted since
    the last call; ``stop()`` closes the proxy, finishes the queued predictions and the log."""

    def __init__(self, upstream: str, config: ReplayConfig, listen: str = DEFAULT_LISTEN,
                 out: Path | None = None, predictor: Predictor | None = None) -> None:
        self.upstream = Upstream.parse(upstream)
        self.host, self.port = parse_listen(listen)
        self.path = out or default_out()
        self.upstream_url = f"http://{self.upstream.host}:{self.upstream.port}{self.upstream.prefix}"
        config.check()
        self.predictor = predictor or Predictor.for_upstream(config, self.upstream_url)
        self.url: str | None = None
        self.rows: deque[WatchRow] = deque()
        self.failure: str | None = None  # the predictor thread's end, if it was not asked for
        self._queue: queue.Queue[Any] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxy: RecordingProxy | None = None
        self._threads: list[threading.Thread] = []
        self._log = None

    @property
    def totals(self) -> Totals:
        return self.predictor.totals

    @property
    def build_label(self) -> str:
        return self.predictor.build.label

    def meta(self) -> dict[str, Any]:
        """What an export says the watch was: where it listened, what it forwarded to, the model."""
        p = self.predictor
        return {"listen": self.url or f"http://{self.host}:{self.port}", "upstream": self.upstream_url,
                "log": str(self.path), "build": self.build_label, "cost_model": p.cost.name,
                "layout": "upstream server" if isinstance(p.prompts, ServerPrompts) else p.config.tokenizer_eff,
                "settings": p.config.settings()}

    def start(self) -> str:
        existed = self.path.exists()
        self._log = open_log(self.path, self._queue.put)
        self._proxy = RecordingProxy(self.upstream, self._log, self.host, self.port)
        bound: queue.Queue[str | BaseException] = queue.Queue()
        proxy_thread = threading.Thread(target=self._serve, args=(bound,), name="replayer-watch-proxy", daemon=True)
        proxy_thread.start()
        got = bound.get()
        if isinstance(got, BaseException):
            proxy_thread.join()
            self._log.close()
            if not existed:  # a watch that never listened leaves no empty log behind
                self.path.unlink(missing_ok=True)
            raise got
        self.url = got
        predict_thread = threading.Thread(target=self._predict, name="replayer-watch-predict", daemon=True)
        predict_thread.start()
        self._threads = [proxy_thread, predict_thread]
        return got

    def _serve(self, bound: queue.Queue) -> None:
        loop = self._loop = asyncio.new_event_loop()
        assert self._proxy is not None
        try:
            try:
                url = loop.run_until_complete(self._proxy.start())
            except Exception as exc:  # start() waits on ``bound``: whatever happened, it must hear of it
                bound.put(exc)
                return
            bound.put(url)
            try:
                loop.run_until_complete(self._proxy.serve())
            except asyncio.CancelledError:
                pass
            loop.run_until_complete(self._proxy.close())
        finally:
            loop.close()

    def _predict(self) -> None:
        while True:
            rec = self._queue.get()
            if rec is _STOP:
                return
            try:
                self.rows.append(self.predictor.add(rec))
            except Exception as exc:  # a bug must show, not stop the watch silently: the row says it
                self.failure = f"prediction failed on request {rec.get('seq')}: {type(exc).__name__}: {exc}"
                row = WatchRow(len(self.predictor.rows), 0, str(rec.get("endpoint")), None, None, None, Side(),
                               note=self.failure)
                self.predictor.rows.append(row)
                self.rows.append(row)

    def drain(self) -> list[WatchRow]:
        out = []
        while self.rows:
            out.append(self.rows.popleft())
        return out

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (requests in flight are cancelled upstream), then let the predictor
        finish what was logged; safe to call twice."""
        loop, proxy = self._loop, self._proxy
        if loop is not None and proxy is not None and not loop.is_closed():
            try:  # close() cancels the connections' tasks first: no wait on a client's keep-alive
                asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(timeout)
            except (RuntimeError, TimeoutError, asyncio.CancelledError, concurrent.futures.TimeoutError):
                pass  # the loop has just closed, or the thread is ending on its own
        if self._threads:
            self._threads[0].join(timeout)
            self._queue.put(_STOP)
            self._threads[1].join(timeout)
            self._threads = []
        if self._log is not None:
            self._log.close()
