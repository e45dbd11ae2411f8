"""Read-only, streaming access to session files.

Agents append whole lines while they run, so a reader can meet a half-written last
line; pi skips unparsable lines and so do we, counting them. Lines are split on ``\\n``
only (JSON strings may hold U+2028). Base64 image payloads are dropped as each line is
parsed, so memory follows the session's text, not its attachments.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson

from replayer.core.errors import ImportFailed
from replayer.core.session import salvage

#: String fields holding binary payloads, replaced by their length on read.
_BLOB_KEYS = {"data", "base64", "image_url", "url"}
_BLOB_MIN = 2048


def _strip_blobs(obj: Any) -> Any:
    """Replace long base64-ish strings under known keys with a size marker, in place. A walk
    with its own stack: orjson parses 1,024 levels, deeper than Python's recursion limit."""
    stack = [obj]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for k, v in cur.items():
                if isinstance(v, str):
                    if k in _BLOB_KEYS and len(v) > _BLOB_MIN and " " not in v[:200]:
                        cur[k] = {"__blob_bytes__": (len(v) * 3) // 4}
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        else:
            stack.extend(v for v in cur if isinstance(v, (dict, list)))
    return obj


def blob_size(value: Any) -> int:
    """Byte size of a payload that ``_strip_blobs`` may have replaced."""
    if isinstance(value, dict) and "__blob_bytes__" in value:
        return int(value["__blob_bytes__"])
    if isinstance(value, str):
        if value.startswith("data:") and "," in value:
            value = value.split(",", 1)[1]
        return (len(value) * 3) // 4
    return 0


#: a JSON text longer than this is parsed by the standard library: orjson asks for a buffer of
#: 10–35× its input before it parses (yyjson's pessimistic value array; a 78 KB OpenAI body
#: peaked at 1.1 MB), ``json`` for the decoded text and the objects (3× that body)
_ORJSON_MAX = 32 << 10
#: a text json finds too deep (past ~1,000 levels) goes to orjson (1,024) up to this size
_ORJSON_DEEP_MAX = 1 << 20
#: what ``json`` reads where orjson refuses: a lone surrogate escape (a ``str`` no output can
#: encode); such a text goes to orjson. NaN, Infinity and a float past a double's range are
#: refused by ``_reject_constant`` and ``_finite``.
_JSON_DIFFERS = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
                           r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]")
_JSON_DIFFERS_B = re.compile(_JSON_DIFFERS.pattern.encode())


#: a character past U+FFFF (an emoji) in UTF-8: one of them makes the decoded ``str`` of a whole
#: file 4 bytes a character (a 756 KB Claude Code log: a 3 MB text), so each is written as its
#: JSON surrogate-pair escape first (UTF-8 past ASCII can only be inside a JSON string), which
#: ``json`` reads back as the same character; the text stays at 1-2 bytes a character
_NON_BMP_B = re.compile(rb"[\xf0-\xf4][\x80-\xbf]{3}")


def _escape_non_bmp(m: re.Match) -> bytes:
    try:
        cp = ord(m.group().decode("utf-8")) - 0x10000
    except (UnicodeDecodeError, TypeError):  # not a character: the decode below refuses it
        return m.group()
    return b"\\u%04x\\u%04x" % (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]} is infinity when parsed as double")
    return value


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """One JSON text read as orjson reads it (its refusals an ``orjson.JSONDecodeError``), with a
    peak memory near the input's: above ``_ORJSON_MAX`` by ``json`` on the decoded text, the
    bytes freed by the caller's choice (a ``str`` handed in)."""
    if isinstance(data, memoryview):
        data = bytes(data)
    small = len(data) <= _ORJSON_MAX
    if small or (_JSON_DIFFERS if isinstance(data, str) else _JSON_DIFFERS_B).search(data):
        return orjson.loads(data)
    try:
        if not isinstance(data, str) and _NON_BMP_B.search(data):
            data = _NON_BMP_B.sub(_escape_non_bmp, data)
        text = data if isinstance(data, str) else data.decode("utf-8")
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite)
    except UnicodeDecodeError as exc:
        raise orjson.JSONDecodeError(f"not UTF-8 (byte {exc.start})", "", exc.start) from None
    except json.JSONDecodeError as exc:
        raise orjson.JSONDecodeError(exc.msg, "", exc.pos) from None
    except RecursionError:  # json stops near 1,000 levels, orjson at 1,024: its word on a small text
        if len(data) <= _ORJSON_DEEP_MAX:
            return orjson.loads(data)
        raise orjson.JSONDecodeError("nested too deeply", "", 0) from None
    except ValueError as exc:
        raise orjson.JSONDecodeError(f"{type(exc).__name__}: {exc}"[:200], "", 0) from None


def check_readable_file(path: Path) -> Path:
    """A clear one-line error for the usual ways a path is not a session file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ImportFailed(f"no such file: {path}") from None
    except PermissionError:
        raise ImportFailed(f"permission denied: {path}") from None
    except OSError as exc:
        raise ImportFailed(f"cannot read {path}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ImportFailed(f"{path} is a directory, not a session file")
    if not stat.S_ISREG(st.st_mode):  # reading a FIFO waits for a writer; a device never ends
        raise ImportFailed(f"{path} is a FIFO, socket or device, not a regular file")
    if st.st_size == 0:
        raise ImportFailed(f"{path} is empty")
    if not os.access(path, os.R_OK):
        raise ImportFailed(f"permission denied: {path}")
    return path


@dataclass
class JsonlStats:
    lines: int = 0
    bad_lines: int = 0
    partial_tail: bool = False
    bad_line_numbers: list[int] = field(default_factory=list)

    def import_stats(self, entries_total: int):
        """The session's ``ImportStats`` and the one-line warning for skipped lines, if any."""
        from replayer.core.session.model import ImportStats

        stats = ImportStats(lines=self.lines, bad_lines=self.bad_lines, partial_tail=self.partial_tail,
                            entries_total=entries_total)
        warnings: list[str] = []
        if self.bad_lines:
            where = "the last line" if self.partial_tail and self.bad_lines == 1 else f"{self.bad_lines} lines"
            warnings.append(f"skipped {where} that did not parse (line {self.bad_line_numbers[:5]})")
        return stats, warnings


def read_records(path: Path, agent: str, once: "JsonlFile | None" = None):
    """All records of a JSONL session whose importer needs them at once (to walk a tree or
    find a header), with its ``ImportStats`` and skipped-lines warning. ``once``: the file
    already parsed for other readers of it (``JsonlFile``), its records handed out again."""
    if once is not None:
        lines, jstats = once.lines()
        records = [r for n, obj in lines if (r := salvage.admit(obj, f"line {n}")) is not None]
    else:
        jstats = JsonlStats()
        records = list(iter_jsonl(path, jstats))
    if not records:
        raise ImportFailed(f"{path} holds no {agent} records")
    stats, warnings = jstats.import_stats(len(records))
    return records, stats, warnings


#: bytes read at a time by ``_lines``
_CHUNK = 64 << 10
#: the smallest read: one page
_CHUNK_MIN = 4096
#: lines longer than this are decoded and parsed by the standard library (see ``_big``)
_BIG_LINE = 8 << 20
#: no agent writes a line this long (a 50 MB pasted image is the largest seen); a longer one is
#: refused when it is reached, so a 2 GB line without a newline costs this much memory, not 2 GB
MAX_LINE = 64 << 20
UTF8_BOM = b"\xef\xbb\xbf"


class LineTooLong(ImportFailed):
    """A JSONL line over ``MAX_LINE``; the reader names the line and its size."""


def _too_long(path: Path, lineno: int, size: int) -> LineTooLong:
    return LineTooLong(f"{path}: line {lineno} is longer than {MAX_LINE >> 20} MB (over {size / (1 << 20):,.0f} MB "
                       "read without a newline): not a session log line")


def _big(line: bytearray) -> bytearray | str:
    """A huge line as ``str``, so its bytes can be freed before it is parsed: orjson holds the
    bytes, a buffer of the same size and the result (3× a 50 MB message), ``json`` on the
    decoded text only the text and the result (2×)."""
    if len(line) <= _BIG_LINE:
        return line
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line  # orjson refuses it: counted as a bad line


def _chunk(fh) -> int:
    """``_CHUNK``, or less for a small file: ``read(n)`` allocates ``n`` before it reads, and
    a 2 KB session needs no 64 KB buffer (a file still being written is read on in these chunks)."""
    try:
        return min(_CHUNK, max(os.fstat(fh.fileno()).st_size + 1, _CHUNK_MIN))
    except (OSError, AttributeError, ValueError):  # not a real file
        return _CHUNK


def _lines(fh, max_line: int | None = None) -> Iterator[bytes | bytearray | str]:
    """The file's lines with their ``\\n``. A line longer than a chunk grows in one
    ``bytearray`` (realloc moves pages, it does not copy them), where ``for line in file``
    would hold its pieces and their join: twice a 50 MB message. A line growing past
    ``max_line`` (default ``MAX_LINE``) raises ``OverflowError`` with its size so far."""
    limit = MAX_LINE if max_line is None else max_line
    buf, chunk = bytearray(), _chunk(fh)
    while data := fh.read(chunk):
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            if buf:
                buf += memoryview(data)[start:nl + 1]
                if len(buf) > limit:
                    raise OverflowError(len(buf))
                line, buf = _big(buf), bytearray()
                yield line
                del line
            else:
                if nl + 1 - start > limit:
                    raise OverflowError(nl + 1 - start)
                yield data[start:nl + 1]
            start = nl + 1
        buf += memoryview(data)[start:]
        del data
        if len(buf) > limit:
            raise OverflowError(len(buf))
    if buf:
        yield _big(buf)


def iter_jsonl(path: Path, stats: JsonlStats | None = None) -> Iterator[dict[str, Any]]:
    """Yield each JSON object line; count and skip the rest (opened read-only)."""
    for lineno, obj in _objects(path, stats if stats is not None else JsonlStats()):
        obj = salvage.admit(obj, f"line {lineno}")
        if obj is not None:  # None: left out of this import for a field it could not read
            yield obj


class JsonlFile:
    """A JSONL file several imports read whole, parsed on the first and kept for the others.

    A Claude Code 1.0.x file holds its subagents as sidechain records: the main thread's
    request times, the sidechains' roots, then each sidechain's conversation and request
    times all read the same file (eleven reads and parses of it for five sidechains). Each
    ``read_records(…, once=)`` hands the parsed lines out again through ``salvage.admit``, so
    every import still names its records and may leave its own bad ones out."""

    __slots__ = ("path", "_lines", "_stats")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: list[tuple[int, dict[str, Any]]] | None = None
        self._stats = JsonlStats()

    def lines(self) -> tuple[list[tuple[int, dict[str, Any]]], JsonlStats]:
        """(line number, object) of each JSON object line, and the counts of the whole file."""
        if self._lines is None:
            stats = JsonlStats()
            lines = list(_objects(self.path, stats))
            self._lines, self._stats = lines, stats
        return self._lines, self._stats


def _objects(path: Path, stats: JsonlStats) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each JSON object line with its number, payloads stripped; the rest counted in ``stats``."""
    last_bad_no_newline = False
    lineno = 0
    with open(path, "rb") as fh:
        lines = _lines(fh)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                break
            except OverflowError as exc:
                raise _too_long(path, lineno + 1, exc.args[0]) from None
            lineno += 1
            if lineno == 1:  # a byte-order mark (Windows editors): UTF-8 all the same
                raw = raw.removeprefix("\ufeff") if isinstance(raw, str) else raw.removeprefix(UTF8_BOM)
            if raw.isspace() or not raw:
                continue
            stats.lines += 1
            try:  # JSON allows the surrounding whitespace: no stripped copy
                obj = loads(raw)
            except ValueError:  # orjson.JSONDecodeError is one
                stats.bad_lines += 1
                if len(stats.bad_line_numbers) < 20:
                    stats.bad_line_numbers.append(lineno)
                last_bad_no_newline = not raw.endswith("\n" if isinstance(raw, str) else b"\n")
                continue
            last_bad_no_newline = False
            if not isinstance(obj, dict):
                stats.bad_lines += 1
                continue
            yield lineno, _strip_blobs(obj)
    stats.partial_tail = last_bad_no_newline


#: detection reads whole lines up to this size; a longer one (a huge message) is skipped, not
#: loaded: the records around it tell the format as well
HEAD_LINE_MAX = 1 << 20


def _head_lines(fh) -> Iterator[bytes]:
    first = True
    while raw := fh.readline(HEAD_LINE_MAX):
        if first and raw.startswith(UTF8_BOM):
            raw = raw[3:]
        first = False
        if len(raw) == HEAD_LINE_MAX and not raw.endswith(b"\n"):
            skipped = len(raw)
            while (rest := fh.readline(HEAD_LINE_MAX)) and not rest.endswith(b"\n"):
                skipped += len(rest)
                if skipped > MAX_LINE:  # past what loading accepts: detection has read enough
                    return
            continue
        yield raw


def head_objects(path: Path, limit: int = 20) -> list[dict[str, Any]]:
    """The first few parsable JSON object lines, for format detection."""
    out: list[dict[str, Any]] = []
    with open(path, "rb") as fh:
        for raw in _head_lines(fh):
            line = raw.strip()
            if not line:
                continue
            try:
                obj = loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
            if len(out) >= limit:
                break
    return out


def json_args(value: Any) -> str:
    """Tool-call arguments as the agents serialise them: compact, raw non-ASCII, key order."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def function_response_text(resp: Any) -> str:
    """A Gemini ``functionResponse.response`` as the tool message's text (Gemini CLI and its fork
    Qwen Code): its ``output`` (or ``content``, ``result``, ``error``) string, else the object as JSON."""
    if isinstance(resp, dict):
        for k in ("output", "content", "result", "error"):
            if isinstance(resp.get(k), str):
                return resp[k]
    return json_args(resp) if resp is not None else ""


def ms_to_s(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return value / 1000.0 if value > 1e11 else float(value)
    return iso_to_s(value)


def iso_to_s(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
