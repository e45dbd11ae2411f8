"""Small text inputs the user names (a template, a system prompt, a tools file), read safely.

``Path.read_text`` on a FIFO or a terminal waits forever, on a binary gives a
``UnicodeDecodeError`` traceback, and on a 20 GB file takes the memory. These readers open
without blocking, check what was actually opened (not what the path was a moment earlier)
and answer every refusal in one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from replayer.core.errors import ReplayerError

#: larger than any real template, system prompt or tool list
MAX_BYTES = 64 << 20


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file; FIFOs, devices, sockets and folders are refused."""
    p = Path(path).expanduser()
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise ReplayerError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO, socket or device"
            raise ReplayerError(f"{what} {p} is {kind}, not a regular file")
        if st.st_size > max_bytes:
            raise ReplayerError(f"{what} {p} is too large ({st.st_size / (1 << 20):.0f} MB; "
                                f"the limit is {max_bytes >> 20} MB)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = _read_upto(fh, st.st_size, max_bytes + 1)
    except OSError as exc:
        raise ReplayerError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ReplayerError(f"{what} {p} is too large (the limit is {max_bytes >> 20} MB)")
    return data


#: what ``_read_upto`` reads at a time once a file has outgrown its ``fstat`` size
_CHUNK = 1 << 20


def _read_upto(fh, size: int, limit: int) -> bytes:
    """At most ``limit`` bytes, allocating for what the file holds: ``read(n)`` allocates ``n``
    up front, so ``read(limit)`` took 256 MB of address space for a 1 KB aider history (a
    ``MemoryError`` traceback under ``ulimit -v 300000``). A file that grew since ``fstat`` (or
    reports no size, as /proc files do) is read on in chunks, still to the limit."""
    data = fh.read(min(size, limit - 1) + 1)
    if len(data) <= size:
        return data
    parts, n = [data], len(data)
    while n < limit and (chunk := fh.read(min(_CHUNK, limit - n))):
        parts.append(chunk)
        n += len(chunk)
    return b"".join(parts)


def read_text(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """UTF-8 text of a regular file; a binary file is refused instead of decoded into noise."""
    data = read_bytes(path, what, max_bytes)
    p = Path(path).expanduser()
    if b"\x00" in data:
        raise ReplayerError(f"{what} {p} is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReplayerError(f"{what} {p} is not UTF-8 text (byte {exc.start})") from None
