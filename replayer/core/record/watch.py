"""``replayer watch``'s engine room, Textual-free: the recording proxy on a thread of its own, and
the prediction of each request on another, the rows handed over through a queue.

Why two threads: the proxy forwards the agent's stream chunk by chunk, so its event loop must
never wait for a repaint or a prediction (a layout asks the upstream server for
``/apply-template`` and ``/tokenize``: blocking HTTP). The log calls ``on_write`` on the proxy's
loop once a line is on disk; that only queues the record. The predictor thread turns each into
a ``WatchRow`` (``predict.Predictor``) and appends it to ``rows``, which the app drains on its own
timer — the same hand-over as a replay's runs (workers append, the screen drains).

Build B can change while the watch runs (``rebuild``): a new predictor is queued like a record,
and the predictor thread feeds it every line this watch logged so far, read back from the log
(the watch keeps no request bodies), then hands over the new rows as a new ``epoch``: the
screen starts its strips and table again from them.

With ``server_log`` (``watch --server-log``, or ``follow`` later: the screen's ``l``) the
predictor thread also follows the upstream's own log (``log_follow``) and completes each record
with its task before predicting it: the slot the server chose when its answer does not say, and
whether it re-processed the whole prompt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from replayer.core.prepare import ReplayConfig
from replayer.core.record.log_follow import LogFollower, with_task
from replayer.core.record.predict import Predictor, ServerPrompts, Side, Totals, WatchRow
from replayer.core.record.proxy import RecordingProxy, Upstream, parse_listen
from replayer.core.record.run import DEFAULT_LISTEN, default_out, open_log

_STOP = object()


class Watch:
    """``start()`` binds and returns the proxy's URL; ``drain()`` gives the rows predicted since
    the last call; ``stop()`` closes the proxy, finishes the queued predictions and the log."""

    def __init__(self, upstream: str, config: ReplayConfig, listen: str = DEFAULT_LISTEN,
                 out: Path | None = None, predictor: Predictor | None = None, server_args: str | None = None,
                 server_log: Path | None = None) -> None:
        self.upstream = Upstream.parse(upstream)
        self.host, self.port = parse_listen(listen)
        self.path = out or default_out()
        self.upstream_url = f"http://{self.upstream.host}:{self.upstream.port}{self.upstream.prefix}"
        config.check()
        self.predictor = predictor or Predictor.for_upstream(config, self.upstream_url, server_args)
        self.server_args = server_args
        self.epoch = 0  # +1 each time build B changed and every row was predicted again
        self._lock = threading.Lock()  # the rows and the epoch change together
        self._fed = 0  # log lines the predictor has been given
        self._offset = 0  # where this watch's lines start in the log (it may append to an older one)
        self.url: str | None = None
        self.rows: deque[WatchRow] = deque()
        self.failure: str | None = None  # the predictor thread's end, if it was not asked for
        self._queue: queue.Queue[Any] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxy: RecordingProxy | None = None
        self._threads: list[threading.Thread] = []
        self._log = None
        self.server_log = server_log  # the upstream's own log, followed (``log_follow``): slots, full re-processing
        self._follower: LogFollower | None = None
        self._from_log: dict[Any, dict[str, Any]] = {}  # seq → the record as the server's log completed it

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
                "settings": p.config.settings(),
                **({"server_log": str(self.server_log)} if self.server_log is not None else {})}

    def start(self) -> str:
        if self.server_log is not None and self._follower is None:  # a bad path: one line, before listening
            self._follower = LogFollower(self.server_log)
        existed = self.path.exists()
        self._log = open_log(self.path, self._queue.put)
        self._offset = self.path.stat().st_size
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
            if isinstance(rec, Predictor):
                self._switch(rec)
                continue
            if isinstance(rec, LogFollower):
                self._follow(rec)
                continue
            self._fed += 1
            row = self._add(self.predictor, self._observe(rec))
            with self._lock:
                self.rows.append(row)

    def _observe(self, rec: dict[str, Any]) -> dict[str, Any]:
        """The record with its task of the server's log, when the watch follows one (matched once:
        a change of build predicts the same records again, with the same tasks)."""
        if self._follower is None:
            return rec
        seq = rec.get("seq")
        if seq not in self._from_log:
            self._from_log[seq] = with_task(rec, self._follower.task_for(rec))
        return self._from_log[seq]

    def _add(self, predictor: Predictor, rec: dict[str, Any]) -> WatchRow:
        try:
            return predictor.add(rec)
        except Exception as exc:  # a bug must show, not stop the watch silently: the row says it
            self.failure = f"prediction failed on request {rec.get('seq')}: {type(exc).__name__}: {exc}"
            row = WatchRow(len(predictor.rows), 0, str(rec.get("endpoint")), None, None, None, Side(),
                           note=self.failure)
            predictor.rows.append(row)
            return row

    def rebuild(self, b: str) -> None:
        """Predict with build ``b`` from now on, every request logged so far again first. A build
        that cannot be simulated is refused here (``ReplayerError``), before anything changes."""
        config = replace(self.predictor.config, b=b)
        config.check()
        self._queue.put(Predictor.for_upstream(config, self.upstream_url, self.server_args))

    def follow(self, server_log: Path) -> None:
        """Follow the upstream's own log from now on (the watch screen's ``l``, for a watch started
        without ``--server-log``, or another file): the requests logged from here on get its facts;
        those before keep what their answers said. A path that is no readable file is refused here
        (``ReplayerError``), before anything changes. The follower is handed to the predictor
        thread through the same queue as the records, so no record is matched half by one log."""
        self._queue.put(LogFollower(server_log))

    def _follow(self, follower: LogFollower) -> None:
        old, self._follower = self._follower, follower
        self.server_log = follower.path
        if old is not None:
            old.close()

    def _switch(self, new: Predictor) -> None:
        rows = []
        with open(self.path, "rb") as fh:  # this watch's lines, each written whole by the log
            fh.seek(self._offset)
            for k, line in enumerate(fh):
                if k >= self._fed:
                    break
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:  # (the log is the user's file: never a crash)
                    rec = {"seq": None, "endpoint": "?"}
                rows.append(self._add(new, self._from_log.get(rec.get("seq"), rec)))
        with self._lock:
            self.predictor = new
            self.rows.clear()
            self.rows.extend(rows)
            self.epoch += 1

    def drain(self) -> list[WatchRow]:
        """The rows predicted since the last call (after a change of build, every row again)."""
        return self.drain_epoch()[1]

    def drain_epoch(self) -> tuple[int, list[WatchRow]]:
        """(epoch, the rows since the last call): a new epoch's rows are every request again, on the new build."""
        with self._lock:
            out = list(self.rows)
            self.rows.clear()
            return self.epoch, out

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
        if self._follower is not None:
            self._follower.close()
