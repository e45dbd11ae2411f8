"""The client what-ifs' one table (``core.what_ifs``) is what every front end offers and prices:
the replay flag, ``prepare_session``'s keyword, the app's choice, and advise's client rows."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from replayer.core import what_ifs
from replayer.core.advise import Settings, advise
from replayer.core.advise_session import SessionSettings, advise_session
from replayer.core.replay import ReplayConfig
from replayer.core.session_replay import prepare_session
from replayer.ui.screens.session import SessionSpec
from replayer.ui.screens.setup import WHAT_IF_OPTIONS

from test_session_mode import _turns, cli, write_log

NAMES = [w.name for w in what_ifs.WHAT_IFS]


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    turns, _, _ = _turns(4)
    return write_log(tmp_path_factory.mktemp("whatif") / "log.jsonl", turns)


def test_the_app_offers_every_what_if_and_its_spec_names_it_back():
    assert [v for _, v in WHAT_IF_OPTIONS] == [what_ifs.NONE, *NAMES]
    for name in [what_ifs.NONE, *NAMES]:
        spec = SessionSpec(Path("s.jsonl"), ReplayConfig(), **what_ifs.switches(name))
        assert spec.what_if == name
        assert sum(what_ifs.switches(name).values()) == (name != what_ifs.NONE)


def test_every_what_if_is_a_keyword_of_the_session_replay_and_a_field_of_advise():
    params = inspect.signature(prepare_session).parameters
    fields = SessionSettings.__dataclass_fields__
    for w in what_ifs.WHAT_IFS:
        assert w.field in params and w.field in fields


@pytest.mark.parametrize("name", NAMES)
def test_every_what_if_is_a_replay_flag_whose_report_names_it(log, name):
    r = cli("replay", str(log), "--mode", "session", f"--{name}", "--json")
    assert r.returncode == 0, r.stderr
    assert f'"{name}"' in r.stdout  # the report's ``what_if`` list


def test_advise_rows_come_from_the_table(log):
    cfg = ReplayConfig(a="10001", b="10001", model="llama-8b-q4_0")
    resume = advise(log, Settings(cfg)).to_dict()
    assert [n["title"] for n in resume["no_effect"] if n["side"] == "client"] == [w.title for w in what_ifs.WHAT_IFS]
    session = advise_session(log, Settings(cfg)).to_dict()
    client = [r["title"] for r in session["recommendations"] + session["no_effect"] if r["side"] == "client"]
    assert sorted(client) == sorted(w.title for w in what_ifs.WHAT_IFS)
    # a switch already on is not offered again
    on = advise_session(log, SessionSettings(cfg, freeze_system=True)).to_dict()
    titles = {r["title"] for r in on["recommendations"] + on["no_effect"]}
    assert what_ifs.WHAT_IFS[0].title not in titles and what_ifs.WHAT_IFS[1].title in titles
