"""A GGUF's KV walk, kept on disk by the file's identity, so a second read skips the walk.

The tokenizer cache is keyed by the content hash of the vocabulary (``tokenizer_cache``), but
finding that hash means walking the KV header: 152k token strings and 151k merges, each length
read and checked, ~0.1 s idle, the largest part of a second ``layout --tokenizer gguf:`` after
the tokenizers library's own load. This module keeps what the walk found (``gguf_kv.Hints``:
where each string array ends, the token table's offsets, the vocabulary's hash) in a file named
by the GGUF's identity: its resolved path, device, inode, size, mtime and ctime (any write to the
file changes its ctime, which user space cannot set back).

The identity only finds the entry. Whether it is used is decided by the content: the SHA-256 of
the GGUF's KV section must equal the recorded one (``gguf_kv.GGUFKV._hints_fit``), and the walk
still reads every key and checks that it ends where the hints said. An entry that is missing,
truncated, altered (its own SHA-256 trailer), of another format or for another identity is
ignored, and the walk done without it writes a new one. What a valid-looking but forged entry
can still do is bounded: offsets are checked on each access (``gguf_kv.Strings``), nothing is
read outside the file, and it cannot do more than a forged tokenizer entry could.

Entry format: ``MAGIC``, a u32 header length, the header (JSON: format, identity, kv_end,
kv_sha256, derived, and per string array [start, count, end, blob offset, blob items]), the
offset blobs (little-endian u64), then the SHA-256 of everything before it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

from replayer.core import paths
from replayer.core.errors import ReplayerError
from replayer.core.prompt import gguf_kv

MAGIC = b"RPLYGIX1"
FORMAT = 1
#: the token table is read at random (BOS, EOS, pieces); the other arrays only whole, on a build
KEEP_OFFSETS = ("tokenizer.ggml.tokens",)
#: an entry is ~8 bytes per token; anything far larger is not one of ours
MAX_ENTRY = 256 << 20


def identity(path: Path) -> str | None:
    """The file's identity, or None (it cannot be stat'ed: the reader reports why)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    return f"{real}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"


def entry(ident: str) -> Path:
    name = hashlib.blake2b(ident.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest()
    return paths.tokenizer_cache_dir() / "gguf-index" / f"{name}.idx"


def read(path: str | Path) -> gguf_kv.GGUFKV:
    """``gguf_kv.read`` with the hints of an earlier walk when they fit; ``kv.hinted`` says
    whether they did (``save`` writes them when not)."""
    p = Path(path).expanduser()
    ident = identity(p)
    hints = load(ident) if ident is not None else None
    kv = gguf_kv.GGUFKV(p, hints)
    kv.identity = ident
    return kv


def load(ident: str) -> gguf_kv.Hints | None:
    """The entry for this identity, or None when absent or not a sound entry of this format."""
    try:
        with open(entry(ident), "rb") as fh:
            raw = fh.read(MAX_ENTRY + 1)
    except OSError:
        return None
    try:
        return _decode(raw, ident)
    except (ValueError, KeyError, TypeError, IndexError, struct.error, OverflowError):
        return None


def _decode(raw: bytes, ident: str) -> gguf_kv.Hints | None:
    if len(raw) > MAX_ENTRY or len(raw) < len(MAGIC) + 4 + 32 or not raw.startswith(MAGIC):
        return None
    body, trailer = raw[:-32], raw[-32:]
    if hashlib.sha256(body).digest() != trailer:
        return None
    (n,) = struct.unpack_from("<I", body, len(MAGIC))
    start = len(MAGIC) + 4
    head = json.loads(body[start:start + n])
    if head["format"] != FORMAT or head["identity"] != ident:
        return None
    blobs = start + n
    strings: dict[int, tuple[int, int, Any]] = {}
    for a_start, count, end, b_off, b_items in head["strings"]:
        if not all(isinstance(x, int) and x >= -1 for x in (a_start, count, end, b_off, b_items)):
            return None
        offsets = None
        if b_off >= 0:
            lo, hi = blobs + b_off, blobs + b_off + 8 * b_items
            if hi > len(body) or b_items != count:
                return None
            offsets = array("Q")
            offsets.frombytes(body[lo:hi])
            if sys.byteorder != "little":
                offsets.byteswap()
        strings[a_start] = (count, end, offsets)
    derived = {str(k): str(v) for k, v in head["derived"].items()}
    return gguf_kv.Hints(int(head["kv_end"]), str(head["kv_sha256"]), strings, derived)


def _encode(hints: gguf_kv.Hints, ident: str) -> bytes:
    rows, blobs, off = [], [], 0
    for a_start, (count, end, offsets) in sorted(hints.strings.items()):
        if offsets is None:
            rows.append([a_start, count, end, -1, 0])
            continue
        blob = array("Q", offsets)
        if sys.byteorder != "little":
            blob.byteswap()
        rows.append([a_start, count, end, off, len(blob)])
        blobs.append(blob.tobytes())
        off += len(blobs[-1])
    head = json.dumps({"format": FORMAT, "identity": ident, "kv_end": hints.kv_end, "kv_sha256": hints.kv_sha256,
                       "derived": hints.derived, "strings": rows}).encode()
    body = MAGIC + struct.pack("<I", len(head)) + head + b"".join(blobs)
    return body + hashlib.sha256(body).digest()


def save(kv: gguf_kv.GGUFKV) -> Path | None:
    """Write the hints of a walked ``kv`` (atomically; a used entry is not rewritten unless
    something was derived since). None when there is nothing to write or the cache is not
    writable: the next read only walks again."""
    ident = kv.identity
    if ident is None or (kv.hinted and not kv.derived_changed):
        return None
    p = entry(ident)
    tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")
    try:
        data = _encode(kv.hints(KEEP_OFFSETS), ident)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, p)
    except (OSError, ReplayerError):
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return None
    return p
