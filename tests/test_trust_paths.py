"""Paths built from session data stay inside the session's own folder (issue 24).

OpenCode's storage import joins ids read out of the untrusted folder into paths; these are
the reproducers: a relative traversal id, an absolute id, an over-long id, a symlinked record.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import orjson
import pytest

from conftest import FIXTURES, REPO
from replayer.core.errors import ImportFailed
from replayer.core.session import load_session


@pytest.fixture
def storage(tmp_path):
    """A copy of the storage fixture and, beside it, a secret file a traversal would reach."""
    root = tmp_path / "data" / "storage"
    shutil.copytree(FIXTURES / "opencode" / "storage", root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.json").write_bytes(orjson.dumps({"id": "msg_leak", "role": "user", "secret": "PLANTED"}))
    return root, outside


def _set_session_id(root, sid):
    f = root / "session" / "global" / "ses_fixture.json"
    doc = orjson.loads(f.read_bytes())
    doc["id"] = sid
    f.write_bytes(orjson.dumps(doc))
    return f


@pytest.mark.parametrize("kind", ["relative", "absolute", "long"])
def test_session_id_traversal_is_refused(storage, kind):
    root, outside = storage
    sid = {"relative": "../../outside", "absolute": str(outside), "long": "s" * 5000}[kind]
    f = _set_session_id(root, sid)
    before = f.read_bytes()
    with pytest.raises(ImportFailed) as err:
        load_session(str(root))
    msg = str(err.value)
    assert "invalid session id" in msg and "\n" not in msg
    if kind == "long":
        assert "5,000 characters" in msg and len(msg) < 300
    assert f.read_bytes() == before  # never modified


def test_message_id_traversal_is_refused(storage):
    root, outside = storage
    m = root / "message" / "ses_fixture" / "msg_001.json"
    doc = orjson.loads(m.read_bytes())
    doc["id"] = "../../../outside"
    m.write_bytes(orjson.dumps(doc))
    with pytest.raises(ImportFailed, match="invalid message id '../../../outside'"):
        load_session(str(root))


def test_symlinked_record_outside_is_refused(storage):
    root, outside = storage
    (root / "message" / "ses_fixture" / "msg_000.json").symlink_to(outside / "leak.json")
    with pytest.raises(ImportFailed, match="points outside the OpenCode storage folder"):
        load_session(str(root))


def test_fifo_record_is_not_waited_on(storage):
    root, _ = storage
    import os

    os.mkfifo(root / "part" / "msg_001" / "prt_000.json")
    with pytest.raises(ImportFailed, match="not a regular file"):
        load_session(str(root))


def test_cli_traversal_one_line_no_traceback(storage):
    root, outside = storage
    _set_session_id(root, str(outside))
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(root), "--json"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "invalid session id" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "PLANTED" not in r.stdout + r.stderr


def test_valid_storage_still_loads(storage):
    root, _ = storage
    s = load_session(str(root))
    assert s.format == "opencode" and len(s.messages) > 1
