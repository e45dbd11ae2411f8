"""OpenCode runs a subagent (its task tool) as a child session: a session with ``parentID``. A
parent imports with each descendant session as its own thread, the requests of all of them in
the order they were sent — from the SQLite database and from the older JSON storage folder.

The fixture is written from the format (``shared/spec/session-formats.md`` §4; the 1.18.33 table
layout): a parent that calls its task tool twice, the first child starting a grandchild.
The parent's steps are one stored message (as older OpenCode wrote them), so only each step's
own time puts the children between them. A real OpenCode creating a child session against the
stub model is tests/agents/test_opencode_subagent.py."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from replayer.cli import main
from replayer.core.session import load_session
from replayer.core.session.turns import MAIN, load_turns, thread_of

T0 = 1_790_000_000_000


def _task(call: str, prompt: str, start: int, end: int) -> dict:
    return {"type": "tool", "tool": "task", "callID": call,
            "state": {"status": "completed", "input": {"description": prompt, "prompt": prompt,
                                                         "subagent_type": "general"},
                      "output": f"<task_result>{prompt}: done</task_result>", "time": {"start": start, "end": end}}}


def _text(text: str, start: int) -> dict:
    return {"type": "text", "text": text, "time": {"start": start, "end": start + 5}}


STEP = {"type": "step-start"}
# session id, parent id, created, updated (ms after T0), its messages: (id, role, created, parts:
# (part, the part row's time_created in the database))
SESSIONS = [
    ("ses_p", None, 1000, 10_000, [
        ("msg_p1", "user", 1000, [(_text("build it with helpers", 1000), 1000)]),
        ("msg_p2", "assistant", 2000, [
            (STEP, 2000), (_task("t1", "look around", 2100, 6000), 2100),
            (STEP, 6500), (_task("t2", "write tests", 6600, 9500), 6600),
            (STEP, 10_000), (_text("All done.", 10_000), 10_000)]),
    ]),
    ("ses_c1", "ses_p", 3000, 5200, [
        ("msg_c1a", "user", 3000, [(_text("look around", 3000), 3000)]),
        ("msg_c1b", "assistant", 3100, [(STEP, 3100), (_task("g1", "look deeper", 3200, 5000), 3200)]),
        ("msg_c1c", "assistant", 5100, [(STEP, 5100), (_text("c1 done", 5100), 5100)]),
    ]),
    ("ses_g1", "ses_c1", 4000, 4200, [
        ("msg_g1a", "user", 4000, [(_text("look deeper", 4000), 4000)]),
        ("msg_g1b", "assistant", 4100, [(STEP, 4100), (_text("g1 done", 4100), 4100)]),
    ]),
    ("ses_c2", "ses_p", 7000, 20_000, [  # updated last: still not the session replayed
        ("msg_c2a", "user", 7000, [(_text("write tests", 7000), 7000)]),
        ("msg_c2b", "assistant", 7100, [(STEP, 7100), ({"type": "tool", "tool": "bash", "callID": "b1", "state": {
            "status": "completed", "input": {"command": "ls"}, "output": "a.py", "time": {"start": 7200, "end": 7300}}},
            7200)]),
        ("msg_c2c", "assistant", 7400, [(STEP, 7400), (_text("c2 done", 7400), 7400)]),
    ]),
]
# when each request was sent: each response of each session, as the steps' times say
WANT = [(MAIN, 1), ("ses_c1", 1), ("ses_g1", 1), ("ses_c1", 3), (MAIN, 3), ("ses_c2", 1), ("ses_c2", 3), (MAIN, 5),
        (MAIN, 6)]


def _database(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript("""
        create table session (id text primary key, project_id text, parent_id text, slug text, directory text,
                              title text, version text, time_created integer, time_updated integer);
        create table message (id text primary key, session_id text, time_created integer, time_updated integer,
                              data text);
        create table part (id text primary key, message_id text, session_id text, time_created integer,
                           time_updated integer, data text);
    """)
    for sid, parent, created, updated, msgs in SESSIONS:
        con.execute("insert into session values (?,?,?,?,?,?,?,?,?)",
                    (sid, "global", parent, sid, "/w", sid, "1.18.33", T0 + created, T0 + updated))
        for mid, role, at, parts in msgs:
            data = {"role": role, "time": {"created": T0 + at}} | (
                {"modelID": "m", "providerID": "local"} if role == "assistant" else {})
            con.execute("insert into message values (?,?,?,?,?)", (mid, sid, T0 + at, T0 + at, json.dumps(data)))
            for k, (part, row_time) in enumerate(parts):
                con.execute("insert into part values (?,?,?,?,?,?)",
                            (f"prt_{mid[4:]}_{k}", mid, sid, T0 + row_time, T0 + row_time,
                             json.dumps(_absolute(part))))
    con.commit()
    con.close()
    return path


def _absolute(part: dict) -> dict:
    """A part with its times as epoch milliseconds."""
    out = json.loads(json.dumps(part))
    for holder in (out.get("time"), (out.get("state") or {}).get("time")):
        if isinstance(holder, dict):
            for k in holder:
                holder[k] += T0
    return out


def _storage(root: Path) -> Path:
    """The JSON storage tree (≤1.1.x): no row times, only the times the parts record."""
    st = root / "storage"
    for sid, parent, created, updated, msgs in SESSIONS:
        (st / "session" / "global").mkdir(parents=True, exist_ok=True)
        info = {"id": sid, "title": sid, "directory": "/w", "version": "1.1.0",
                "time": {"created": T0 + created, "updated": T0 + updated}} | ({"parentID": parent} if parent else {})
        f = st / "session" / "global" / f"{sid}.json"
        f.write_text(json.dumps(info))
        os.utime(f, (T0 / 1000 + updated, T0 / 1000 + updated))  # the newest file is a child's
        for mid, role, at, parts in msgs:
            (st / "message" / sid).mkdir(parents=True, exist_ok=True)
            data = {"id": mid, "sessionID": sid, "role": role, "time": {"created": T0 + at}}
            (st / "message" / sid / f"{mid}.json").write_text(json.dumps(data))
            for k, (part, _) in enumerate(parts):
                (st / "part" / mid).mkdir(parents=True, exist_ok=True)
                (st / "part" / mid / f"prt_{mid[4:]}_{k}.json").write_text(
                    json.dumps({"id": f"prt_{mid[4:]}_{k}", "messageID": mid, **_absolute(part)}))
    return st


@pytest.fixture(params=["database", "storage"])
def stored(request, tmp_path) -> Path:
    return _database(tmp_path / "opencode.db") if request.param == "database" else _storage(tmp_path)


def test_a_parent_session_imports_with_its_child_sessions_as_threads_in_time_order(stored):
    st = load_turns(stored)
    assert st.session.session_id == "ses_p"
    assert [(thread_of(t), len(t.messages)) for t in st.turns] == WANT
    assert st.turns[1].messages == [{"role": "user", "content": "look around"}]
    assert any(n.startswith("5 subagent request(s) on 3 thread(s) from the child sessions") for n in st.notes)


def test_inspect_counts_each_child_sessions_requests(stored, capsys):
    assert main(["inspect", str(stored), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["threads"] == {MAIN: 4, "ses_c1": 2, "ses_g1": 1, "ses_c2": 2}
    assert info["turns"] == len(WANT) and info["session_id"] == "ses_p"


def test_a_child_session_loads_on_its_own_by_id(stored):
    s = load_session(stored, session_id="ses_c2")
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert s.messages[-1].text() == "c2 done"


def test_odd_session_files_beside_the_parent_do_not_stop_it(tmp_path):
    """A session file whose ``parentID`` is not an id, one that is not JSON, and a child whose
    messages cannot be read: the parent and its readable children still import."""
    st = _storage(tmp_path)
    (st / "session" / "global" / "ses_odd.json").write_text(json.dumps({"id": "ses_odd", "parentID": ["ses_p"]}))
    (st / "session" / "global" / "ses_bad.json").write_text("{not json")
    (st / "session" / "global" / "ses_c9.json").write_text(json.dumps({"id": "ses_c9", "parentID": "ses_p",
                                                                        "time": {"created": T0 + 9000}}))
    for name in ("ses_odd", "ses_bad", "ses_c9"):  # older than the parent: not the newest session
        os.utime(st / "session" / "global" / f"{name}.json", (T0 / 1000, T0 / 1000))
    turns = load_turns(st)
    assert [(thread_of(t), len(t.messages)) for t in turns.turns] == WANT
    assert any(n.startswith("subagent thread ses_c9 left out: ") for n in turns.notes)
