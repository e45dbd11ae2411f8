"""A fast, bounded reader of a GGUF file's key/value header.

``gguf.GGUFReader`` maps every value and tensor of the file into numpy parts, one per string:
for a 152k-token vocabulary that is ~8 s on a busy machine, before any tokenizer is built.
The tokenizer needs a dozen keys, so this reader walks the KV section once over a read-only
``mmap`` and keeps, for each array, its element type, count and byte range. Strings are
decoded only when asked for, and the raw ranges are what the tokenizer cache hashes.

The file is untrusted: every count and length is checked against the bytes left in the file
before anything is allocated or decoded, nested arrays are limited in depth, and any
violation is one ``ReplayerError`` naming the key and the offset (the layout follows
``gguf_init_from_file_impl`` in llama.cpp's ``ggml/src/gguf.cpp``: magic, version, tensor
count, KV count, then each KV as key string, type, value).

Walking the strings is most of the reader's time (152k tokens and 151k merges: ~0.1 s idle).
``Hints`` (kept on disk by ``gguf_index``) let a second read skip it: where each string array
ends and, for the token table, where each string starts. They are used only when the SHA-256 of
the file's KV section equals the one recorded with them, every other value is still read and
checked by the walk, a walk that does not end where the hints said is done again without them,
and hinted string offsets are checked against their neighbours on each access.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any

from replayer.core.errors import ReplayerError

MAGIC = b"GGUF"
#: GGUF value types (``enum gguf_type``)
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}
_SIZE = {t: struct.calcsize(f) for t, f in _SCALAR.items()}
_NUMPY = {U8: "<u1", I8: "<i1", U16: "<u2", I16: "<i2", U32: "<u4", I32: "<i4", F32: "<f4", BOOL: "<u1",
          U64: "<u8", I64: "<i8", F64: "<f8"}
#: a key longer than this is a corrupt file, not a name
MAX_KEY = 1 << 16
MAX_DEPTH = 4
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class Array:
    """An array value, not decoded: its element type, count and bytes ``[start, end)``;
    for strings, where each one starts (found by the walk that checked their lengths, or from
    the hints: ``hinted``; None when the hints skipped the array and nothing asked for it yet)."""

    elem: int
    count: int
    start: int
    end: int
    offsets: Any = None
    hinted: bool = False


@dataclass
class Hints:
    """What an earlier walk of the same bytes found: the KV section's length and SHA-256, and
    for each string array (by its start) its count, its end and perhaps its items' offsets;
    ``derived``: small values computed from the KV bytes (the vocabulary's hash)."""

    kv_end: int
    kv_sha256: str
    strings: dict[int, tuple[int, int, Any]]
    derived: dict[str, str] = field(default_factory=dict)


class Strings(Sequence[str]):
    """A string array decoded item by item on access: a cached tokenizer reads two tokens of
    152k (BOS, EOS), and decoding all of them costs more than the rest of its start.

    ``rewalk`` is set when the offsets came from hints rather than a walk of this file: each
    item is then checked to end where the next begins (the last where the array ends), and the
    first that does not replaces them with the walk's; iterating walks first.
    """

    def __init__(self, buf: Any, offsets: Any, end: int, rewalk: Callable[[], Any] | None = None) -> None:
        self._buf, self._offsets, self._end, self._rewalk = buf, offsets, end, rewalk

    def __len__(self) -> int:
        return len(self._offsets)

    def _walked(self) -> None:
        if self._rewalk is not None:
            self._offsets, self._rewalk = self._rewalk(), None

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n_items = len(self._offsets)
        if i < 0:
            i += n_items
        pos = self._offsets[i]  # IndexError out of range, as a list
        if self._rewalk is not None:
            nxt = self._offsets[i + 1] if i + 1 < n_items else self._end
            if pos + 8 > self._end or pos + 8 + _U64.unpack_from(self._buf, pos)[0] != nxt:
                self._walked()
                pos = self._offsets[i]
        n = _U64.unpack_from(self._buf, pos)[0]
        return self._buf[pos + 8:pos + 8 + n].decode("utf-8", "replace")

    def __iter__(self):
        self._walked()
        buf, unpack = self._buf, _U64.unpack_from
        for pos in self._offsets:
            n = unpack(buf, pos)[0]
            yield buf[pos + 8:pos + 8 + n].decode("utf-8", "replace")

    def tolist(self) -> list[str]:
        return list(iter(self))


class GGUFKV:
    """The KV header of one GGUF: ``get(key)`` decodes a value on demand."""

    def __init__(self, path: str | Path, hints: Hints | None = None) -> None:
        self.path = Path(path).expanduser()
        try:
            with open(self.path, "rb") as fh:
                size = self.path.stat().st_size
                if size < 24:
                    raise ReplayerError(f"{self.path} is not a GGUF file (only {size} bytes)")
                self._buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise ReplayerError(f"no such GGUF file: {self.path}") from None
        except IsADirectoryError:
            raise ReplayerError(f"{self.path} is a directory, not a GGUF file") from None
        except (OSError, ValueError) as exc:
            raise ReplayerError(f"{self.path} is not a readable GGUF file: {exc}") from None
        self.size = size
        self.values: dict[str, Any] = {}
        #: small values computed from the KV bytes, kept with the hints (``tokenizer_cache``'s hash)
        self.derived: dict[str, str] = {}
        self.derived_changed = False
        #: the file's identity when read through ``gguf_index`` (where its hints are kept)
        self.identity: str | None = None
        self._walked: dict[int, Any] = {}
        self.hinted = False
        self._hints: dict[int, tuple[int, int, Any]] = {}
        if hints is not None and self._hints_fit(hints):
            try:
                self._parse()
                self.hinted = self.kv_end == hints.kv_end
            except ReplayerError:
                pass  # the walk without them says what is wrong with the file
            if self.hinted:
                self.derived = dict(hints.derived)
                return
            self.values, self._hints = {}, {}
        self._parse()

    def _hints_fit(self, hints: Hints) -> bool:
        """Whether the hints were made from these bytes: the KV section's SHA-256 (~5 ms for a
        152k vocabulary; the walk it saves is ~20 times that)."""
        if not 24 <= hints.kv_end <= self.size:
            return False
        if hashlib.sha256(self._buf[:hints.kv_end]).hexdigest() != hints.kv_sha256:
            return False
        self._hints = hints.strings
        return True

    def hints(self, offsets_of: tuple[str, ...] = ()) -> Hints:
        """The hints a later read of the same bytes can use; the string offsets of the
        ``offsets_of`` keys are kept (the others are walked when asked for)."""
        keep = {self.values[k].start for k in offsets_of if isinstance(self.values.get(k), Array)}
        strings = {}
        for v in self.values.values():
            if isinstance(v, Array) and v.elem == STRING:
                offsets = (v.offsets if v.hinted else self._offsets(v)) if v.start in keep else None
                strings[v.start] = (v.count, v.end, offsets)
        return Hints(self.kv_end, hashlib.sha256(self._buf[:self.kv_end]).hexdigest(), strings, dict(self.derived))

    # -- parsing --------------------------------------------------------------------------

    def _fail(self, what: str, pos: int) -> ReplayerError:
        return ReplayerError(f"{self.path.name} is not a valid GGUF file: {what} (at byte {pos:,})")

    def _need(self, pos: int, n: int, what: str) -> None:
        if n < 0 or pos + n > self.size:
            raise self._fail(f"{what} runs past the end of the file ({n:,} bytes wanted)", pos)

    def _scalar(self, t: int, pos: int, what: str) -> tuple[Any, int]:
        n = _SIZE[t]
        self._need(pos, n, what)
        return struct.unpack_from(_SCALAR[t], self._buf, pos)[0], pos + n

    def _string(self, pos: int, what: str, limit: int | None = None) -> tuple[bytes, int]:
        self._need(pos, 8, what)
        (n,) = _U64.unpack_from(self._buf, pos)
        if limit is not None and n > limit:
            raise self._fail(f"{what} is {n:,} bytes long", pos)
        self._need(pos + 8, n, what)
        return self._buf[pos + 8:pos + 8 + n], pos + 8 + n

    def _skip_strings(self, pos: int, count: int, what: str) -> tuple[int, array]:
        """The end of ``count`` strings from ``pos`` and where each starts: each length
        checked against the file before the next is read."""
        buf, size, unpack = self._buf, self.size, _U64.unpack_from
        offsets = array("Q")
        add = offsets.append
        for _ in range(count):
            if pos + 8 > size:
                raise self._fail(f"{what} runs past the end of the file", pos)
            add(pos)
            pos += 8 + unpack(buf, pos)[0]
        if pos > size:
            raise self._fail(f"{what} runs past the end of the file", pos)
        return pos, offsets

    def _value(self, t: int, pos: int, what: str, depth: int = 0) -> tuple[Any, int]:
        if t in _SCALAR:
            return self._scalar(t, pos, what)
        if t == STRING:
            raw, pos = self._string(pos, what)
            return raw.decode("utf-8", "replace"), pos
        if t != ARRAY:
            raise self._fail(f"{what} has unknown type {t}", pos)
        if depth >= MAX_DEPTH:
            raise self._fail(f"{what} nests arrays more than {MAX_DEPTH} deep", pos)
        elem, pos = self._scalar(U32, pos, what)
        count, pos = self._scalar(U64, pos, what)
        start = pos
        if elem in _SCALAR:
            self._need(pos, count * _SIZE[elem], f"{what} ({count:,} items)")
            return Array(elem, count, start, pos + count * _SIZE[elem]), pos + count * _SIZE[elem]
        if elem == STRING:
            self._need(pos, count * 8, f"{what} ({count:,} strings)")  # every string has its length
            hint = self._hints.get(start)
            if hint is not None and hint[0] == count and start + 8 * count <= hint[1] <= self.size:
                offsets = hint[2] if hint[2] is not None and len(hint[2]) == count else None
                if offsets is not None and count and offsets[0] != start:
                    offsets = None
                return Array(elem, count, start, hint[1], offsets, hinted=True), hint[1]
            end, offsets = self._skip_strings(pos, count, what)
            return Array(elem, count, start, end, offsets), end
        if elem == ARRAY:
            self._need(pos, count * 12, f"{what} ({count:,} arrays)")
            for _ in range(count):  # each item: its own element type, count and data
                _, pos = self._value(ARRAY, pos, what, depth + 1)
            return Array(elem, count, start, pos), pos
        raise self._fail(f"{what} is an array of unknown type {elem}", pos)

    def _parse(self) -> None:
        buf = self._buf
        if buf[:4] != MAGIC:
            raise self._fail("no GGUF magic", 0)
        self.version, pos = self._scalar(U32, 4, "version")
        if self.version not in (2, 3):
            raise self._fail(f"GGUF version {self.version} is not supported", 4)
        self.n_tensors, pos = self._scalar(U64, pos, "tensor count")
        n_kv, pos = self._scalar(U64, pos, "key/value count")
        if n_kv * 13 > self.size - pos:  # a key (8 + 1 bytes) and a type (4) at the least
            raise self._fail(f"{n_kv:,} keys cannot fit in the file", pos)
        for i in range(n_kv):
            raw, pos = self._string(pos, f"key #{i}", MAX_KEY)
            key = raw.decode("utf-8", "replace")
            t, pos = self._scalar(U32, pos, f"type of {key}")
            self.values[key], pos = self._value(t, pos, key)
        self.kv_end = pos

    # -- access ---------------------------------------------------------------------------

    def derive(self, name: str, compute: Callable[["GGUFKV"], str]) -> str:
        """A value computed from the KV bytes, kept with the hints: a second read with them
        does not compute it again."""
        if name not in self.derived:
            self.derived[name] = compute(self)
            self.derived_changed = True
        return self.derived[name]

    def __contains__(self, key: str) -> bool:
        return key in self.values

    def raw(self, key: str) -> bytes:
        """The bytes of an array value, as stored (what the tokenizer cache hashes)."""
        v = self.values.get(key)
        return self._buf[v.start:v.end] if isinstance(v, Array) else b""

    def get(self, key: str, default: Any = None) -> Any:
        """A scalar, a string, or a decoded array (a list; numbers through numpy)."""
        v = self.values.get(key, default)
        if not isinstance(v, Array):
            return v
        if v.elem == STRING:
            return Strings(self._buf, self._offsets(v), v.end).tolist()
        if v.elem in _NUMPY:
            return self.numbers(key).tolist()
        return default  # arrays of arrays: nothing the tokenizer reads

    def lazy_strings(self, key: str) -> Strings | None:
        v = self.values.get(key)
        if not isinstance(v, Array) or v.elem != STRING:
            return None
        if v.hinted and v.offsets is not None:
            return Strings(self._buf, v.offsets, v.end, rewalk=lambda: self._offsets(v, walk=True))
        return Strings(self._buf, self._offsets(v), v.end)

    def _offsets(self, v: Array, walk: bool = False) -> Any:
        """Where each string of ``v`` starts: the walk's, walked now when hints skipped it (or
        ``walk``: their offsets did not check out)."""
        if v.offsets is not None and not (walk or v.hinted):
            return v.offsets
        cached = self._walked.get(v.start)
        if cached is None:
            end, cached = self._skip_strings(v.start, v.count, f"strings at byte {v.start:,}")
            if end != v.end:
                raise self._fail("a string array does not end where the walk before this one found", v.start)
            self._walked[v.start] = cached
        return cached

    def numbers(self, key: str) -> Any:
        """A numeric array as a numpy view of the file (no copy)."""
        import numpy as np

        v = self.values[key]
        arr = np.frombuffer(self._buf, dtype=_NUMPY[v.elem], count=v.count, offset=v.start)
        return arr.astype(bool) if v.elem == BOOL else arr

    def close(self) -> None:
        self._buf.close()


def read(path: str | Path) -> GGUFKV:
    return GGUFKV(path)
