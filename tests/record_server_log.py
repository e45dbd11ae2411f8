"""Record the data of ``tests/data/server-log/``: the two interleaved agents of
``test_calibrate_log_live.conversation`` through ``replayer record`` (the proxy in-process) to a
real b9859 with two slots (``-np 2 --cache-ram 0``), the server writing its own ``-lv 4``
``--log-file``. Both files of one run: the traffic log (the answers: no ``id_slot`` in b9859) and
the server's log (which slot ran each task, its ``cache_n``).

    python tests/record_server_log.py OUT_DIR     # needs b9859 installed (never builds it)
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record_fakes import proxy_to  # noqa: E402
from test_calibrate_log_live import conversation  # noqa: E402
from test_record_live import BUILD, CTX, _binary  # noqa: E402

from replayer.core.engine.live import LiveOptions, LiveServer  # noqa: E402
from replayer.core.runspec import Knobs  # noqa: E402
from replayer.core.server.help import help_for  # noqa: E402
from replayer.core.server.setup import parse_server_args  # noqa: E402
from replayer.core.tiny_models import make_tiny  # noqa: E402

SERVER_ARGS = f"-np 2 --cache-ram 0 -c {2 * CTX}"


def record(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    server_log = out / "server.log"
    model = make_tiny("llama", out / "llama.gguf")

    class LoggingServer(LiveServer):
        def command(self) -> list[str]:
            return [*super().command(), "--log-file", str(server_log)]

    with LoggingServer(LiveOptions(binary=_binary(), model=model), Knobs(), 2 * CTX,
                       setup=parse_server_args(SERVER_ARGS, help_for(BUILD))) as server, \
            httpx.Client(timeout=300) as c:
        server.wait_healthy(c)
        with proxy_to(server.url, out / "traffic.jsonl") as proxy:
            bodies = conversation()
            for body in bodies:
                assert c.post(f"{proxy.url}/v1/chat/completions", json=body).status_code == 200
            proxy.wait_lines(len(bodies), timeout=60)
    (out / "llama.gguf").unlink()  # the tiny model is not data (a test that needs one makes it)
    return len(bodies)


if __name__ == "__main__":
    n = record(Path(sys.argv[1]))
    print(f"{n} requests; b{BUILD} {SERVER_ARGS}", file=sys.stderr)
