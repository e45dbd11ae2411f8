"""Read a user's SQLite database without writing a byte beside it.

A URI built by pasting the path into ``file:…`` lets ``?`` and ``#`` in a folder name end the
path early (SQLite then opens a *different* file, read-write) and ``%3F`` be decoded; the URI
here comes from ``Path.as_uri()``, which percent-encodes them.

``mode=ro`` alone is not read-only on disk: a WAL database makes SQLite create a ``-shm``
beside it (and write read-marks into an existing one), and a database with a hot journal
cannot be read at all. ``immutable=1`` avoids both but ignores the ``-wal`` — the newest
messages, silently. So: a database with no ``-wal``/``-journal`` content is read in place as
immutable (nothing else to read); one with such a file is copied, with it, into a private
temporary folder, and the copy is read — SQLite applies the WAL (or rolls back the journal)
there, never beside the user's files.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from replayer.core.errors import ImportFailed

#: files SQLite keeps beside a database whose content the database needs
SIDECARS = ("-wal", "-journal")


def _sidecars(path: Path) -> list[Path]:
    out = []
    for suffix in SIDECARS:
        side = path.with_name(path.name + suffix)
        try:
            if side.stat().st_size > 0:
                out.append(side)
        except OSError:  # absent (or unreadable: then the copy below says so)
            continue
    return out


def _uri(path: Path, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{path.absolute().as_uri()}?{query}"


@contextmanager
def open_readonly(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection that sees every committed row and never writes near ``path``."""
    path = Path(path)
    sides = _sidecars(path)
    if not sides:
        con = _connect(path, _uri(path, mode="ro", immutable="1"))
        try:
            yield con
        finally:
            con.close()
        return
    with tempfile.TemporaryDirectory(prefix="replayer-sqlite-") as tmp:
        copy = Path(tmp) / "copy.db"
        try:
            shutil.copyfile(path, copy)
            for side in sides:
                shutil.copyfile(side, copy.with_name(copy.name + side.name[len(path.name):]))
        except OSError as exc:
            raise ImportFailed(f"cannot read {exc.filename or path}: {exc.strerror or exc}") from None
        con = _connect(path, _uri(copy, mode="rw"))
        try:
            yield con
        finally:
            con.close()


def _connect(path: Path, uri: str) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise ImportFailed(f"cannot open {path} as SQLite: {exc}") from None
    try:
        con.execute("select 1 from sqlite_master limit 1").fetchall()
    except sqlite3.DatabaseError as exc:
        con.close()
        raise ImportFailed(f"cannot read {path} as SQLite: {exc}") from None
    return con


def table_names(path: Path) -> frozenset[str]:
    """The tables of the database at ``path`` (empty when it cannot be read), for detection:
    several agents keep their sessions in SQLite (OpenCode, Kilo, Crush, Goose) and only the
    schema tells them apart. Read as a load reads it (``open_readonly``): a table a migration
    added may still be in the write-ahead log only. Remembered per state of the file and its
    sidecars, since every SQLite format's detection asks."""
    path = Path(path)
    try:
        states = tuple((s.st_mtime_ns, s.st_size) for p in (path, *(_sidecars(path)))
                       for s in (p.stat(),))
    except OSError:
        return frozenset()
    return _table_names(str(path.absolute()), states)


@lru_cache(maxsize=64)
def _table_names(path: str, _states: tuple) -> frozenset[str]:
    try:
        with open_readonly(Path(path)) as con:
            return frozenset(r[0] for r in con.execute("select name from sqlite_master where type='table'"))
    except (ImportFailed, sqlite3.Error):
        return frozenset()
