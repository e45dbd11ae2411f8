"""Length-prefixed frames over a pipe: the parent and its worker processes (the template
sandbox's render worker, the tokenizer worker) speak in them. Its own module, free of imports,
so that a worker's start pays for nothing it does not use."""

from __future__ import annotations

import struct
import subprocess
import threading
from typing import BinaryIO


def send_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(struct.pack("<Q", len(payload)) + payload)
    stream.flush()


def await_ready(proc: subprocess.Popen, ready: bytes, seconds: float) -> bool:
    """Whether ``proc``'s first byte is ``ready``; a worker silent for ``seconds`` is killed."""
    timer = threading.Timer(seconds, proc.kill)
    timer.start()
    try:
        return proc.stdout.read(1) == ready
    finally:
        timer.cancel()


def receive_frame(stream: BinaryIO) -> bytes | None:
    """The next frame, or None at the end of the stream or in a frame cut short."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    data = stream.read(n)
    return data if len(data) == n else None
