"""Run one command so that its whole process tree dies with replayer.

``processes.spawn`` has the kernel signal a child when replayer dies, but only that child: a
build step (cmake → make → compilers) would run on without its parent. This guard is that child
instead: the leader of the step's session, it runs the command in its group, gets SIGTERM from
the kernel when replayer dies (``spawn(..., death_signal=SIGTERM)``), and answers it by killing
every process of its session, itself last. Otherwise it only waits and passes on the exit code.

Usage: ``python -m replayer.core.tree_guard CMD [ARG ...]``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from replayer.core.processes import members


def _kill_session(_signum: int, _frame: object) -> None:
    """Every process of the session (one that left the group too), then the group, the guard with it."""
    me = os.getpid()
    with contextlib.suppress(OSError):  # no /proc: the group alone
        for pid in members(os.getsid(0)):
            if pid != me:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _kill_session)
    child = subprocess.Popen(argv)
    rc = child.wait()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
