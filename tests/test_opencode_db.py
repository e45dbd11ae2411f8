"""OpenCode's SQLite database is read without touching the user's files, whatever the path
and whatever state its write-ahead log is in; the newest messages (still in the WAL) count.

Every case checks the folder byte for byte (names, sizes and SHA-256 of every file) before
and after the import.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from conftest import FIXTURES
from replayer.core.errors import ImportFailed
from replayer.core.session import load_session

NEWEST = "NEWEST-MESSAGE-ONLY-IN-THE-WAL"


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder``: its SHA-256, or "dir"."""
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def _add_newest(con: sqlite3.Connection) -> None:
    data = {"role": "user", "time": {"created": 1790000009000}}
    con.execute("insert into message values ('msg_900','ses_fixture',1790000009000,1790000009000,?)",
                (json.dumps(data),))
    con.execute("insert into part values ('prt_900','msg_900','ses_fixture',0,0,?)",
                (json.dumps({"type": "text", "text": NEWEST}),))
    con.commit()


def wal_database(folder: Path, *, with_shm: bool = False) -> Path:
    """``opencode.db`` in WAL mode whose newest message is only in ``opencode.db-wal``, as a
    running OpenCode leaves it (copied while the writer holds it open, so nothing was
    checkpointed)."""
    work = Path(tempfile.mkdtemp(prefix="oc-writer-"))
    try:
        db = work / "opencode.db"
        shutil.copyfile(FIXTURES / "opencode" / "opencode.db", db)
        con = sqlite3.connect(db)
        con.execute("pragma journal_mode=wal")
        con.execute("pragma wal_autocheckpoint=0")
        _add_newest(con)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("opencode.db", "opencode.db-wal") + (("opencode.db-shm",) if with_shm else ()):
            shutil.copyfile(work / name, folder / name)
        con.close()
    finally:
        shutil.rmtree(work)
    assert (folder / "opencode.db-wal").stat().st_size > 0
    return folder / "opencode.db"


def last_user_text(path: Path) -> str:
    s = load_session(path)
    return [m for m in s.messages if m.role == "user"][-1].text()


@pytest.mark.parametrize("name", ["a?b#c", "x%3Fy", "with space", "q?mode=rw", "h#frag", "100%", "ü-ñ"])
def test_odd_folder_names_open_the_right_file_and_change_nothing(tmp_path, name):
    # the decoy is what a pasted `file:` URI would open instead: the path cut at `?` or `#`
    decoy = tmp_path / name.split("?")[0].split("#")[0]
    if decoy != tmp_path / name:
        shutil.copyfile(FIXTURES / "opencode" / "opencode.db", decoy)
    folder = tmp_path / name
    db = wal_database(folder)
    before, before_top = snapshot(folder), snapshot(tmp_path) if decoy.is_file() else None
    assert last_user_text(db) == NEWEST
    assert snapshot(folder) == before
    if before_top is not None:
        assert snapshot(tmp_path) == before_top and decoy.is_file()


def test_wal_without_shm_in_a_writable_folder_creates_nothing_beside_it(tmp_path):
    db = wal_database(tmp_path / "data")
    before = snapshot(db.parent)
    s = load_session(db)
    assert s.messages[-1].role == "user" and s.messages[-1].text() == NEWEST
    assert snapshot(db.parent) == before  # no -shm, the -wal neither checkpointed nor removed


def test_wal_with_shm_left_byte_identical(tmp_path):
    db = wal_database(tmp_path / "data", with_shm=True)
    before = snapshot(db.parent)
    assert last_user_text(db) == NEWEST
    assert snapshot(db.parent) == before


def test_a_checkpointed_wal_database_reads_in_place(tmp_path):
    folder = tmp_path / "data"
    db = wal_database(folder)
    con = sqlite3.connect(db)
    con.execute("pragma wal_checkpoint(truncate)")
    con.close()  # the last connection removes -wal and -shm: WAL mode, no sidecars
    assert sorted(p.name for p in folder.iterdir()) == ["opencode.db"]
    before = snapshot(folder)
    assert last_user_text(db) == NEWEST
    assert snapshot(folder) == before


def test_wal_without_shm_in_a_read_only_folder_keeps_the_newest_messages(tmp_path):
    """The folder the user cannot write to: run as an unprivileged user when tests run as root
    (root writes through permission bits)."""
    base = Path(tempfile.mkdtemp(prefix="oc-ro-"))
    try:
        os.chmod(base, 0o755)
        db = wal_database(base / "data")
        for p in db.parent.iterdir():
            os.chmod(p, 0o444)
        os.chmod(db.parent, 0o555)
        before = snapshot(db.parent)
        assert _load_as_unprivileged(db) == NEWEST
        assert snapshot(db.parent) == before
    finally:
        os.chmod(base / "data", 0o755)
        shutil.rmtree(base)


def _load_as_unprivileged(db: Path) -> str:
    """The last user text, read by a forked child that drops root first (the modules are
    already imported, so it needs nothing under /root)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(rfd)
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            os.write(wfd, last_user_text(db).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported through the pipe
            os.write(wfd, f"ERROR {type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        out = fh.read().decode()
    os.waitpid(pid, 0)
    return out


def test_a_corrupt_database_is_one_clear_error_and_left_alone(tmp_path):
    db = tmp_path / "opencode.db"
    raw = (FIXTURES / "opencode" / "opencode.db").read_bytes()
    db.write_bytes(raw[:100] + b"\xff" * (len(raw) - 100))
    (tmp_path / "opencode.db-wal").write_bytes(b"not a wal")
    before = snapshot(tmp_path)
    with pytest.raises(ImportFailed) as err:
        load_session(db, "opencode")
    assert "opencode.db" in str(err.value) and "\n" not in str(err.value)
    assert snapshot(tmp_path) == before
