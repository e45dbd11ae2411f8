"""``replayer replay``: the main command, headless (text, ``--json``, ``--jsonl``, ``--markdown``)
or in the app (``--app``, ``--screenshot``); the run itself is ``core.pipeline.Replay``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import orjson

from replayer.cli_args import out as _out
from replayer.core.errors import ReplayerError
from replayer.core.options import config_from as _config


def _calibration_flags(args: argparse.Namespace) -> None:
    """``--calibrate``, ``--holdout`` and ``--repeat`` fit a line from the CLI's live resume
    replay; the app and the session mode do not calibrate, so they refuse them rather than
    drop them silently."""
    given = [flag for flag, on in (("--calibrate", args.calibrate), ("--holdout", args.holdout),
                                   ("--repeat", args.repeat != 1)) if on]
    if not given:
        return
    where = "--app" if args.app else "--screenshot" if args.screenshot else "--mode session" \
        if args.mode == "session" else None
    if where:
        raise ReplayerError(f"{' and '.join(given)}: calibration runs in the CLI's live resume replay, not with "
                            f"{where} (calibrate without {where}, then replay with --calibration ID)")


def _traffic_log(path: str) -> bool:
    from replayer.core.session import registry

    try:
        return registry.detect(Path(path).expanduser()) == "traffic-log"
    except ReplayerError:
        return False  # the replay itself says what is wrong with the file


def _calibrate_log(args: argparse.Namespace, cfg) -> int:
    """``replay LOG --calibrate``: the line fitted on the log's recorded timings (no run at all)."""
    from replayer.core.record.calibrate_log import calibrate_log

    if args.repeat != 1:
        raise ReplayerError("--repeat times live runs; a traffic log's timings were recorded once")
    if args.app or args.screenshot:
        raise ReplayerError("--calibrate on a traffic log fits its recorded timings in the CLI; in the app, "
                            "open the log and press c in its session screen")
    name, cal, said = calibrate_log(Path(args.session).expanduser(), cfg)
    if args.json:
        _out(orjson.dumps({"calibration": {"id": name, **cal.model_dump(mode="json"),
                                           "held_out_error": cal.held_out_error()}},
                          option=orjson.OPT_INDENT_2).decode())
    else:
        _out(said)
    return 0


def _prompt_folder_checks(args: argparse.Namespace) -> str | None:
    """A ``--log-prompts-dir`` folder is replayed turn by turn (it holds prompts, not a
    conversation to resume), and ``--observed`` reads its server's log: both said in one line
    before any run, the log read once here so that a bad one is refused first. Without
    ``--observed``, a server's log that sits with the folder (``server_log.log_beside``) is its
    observed side, said on stderr. Returns the log to read as the observed side (or None)."""
    from replayer.core.prepare import PROMPT_LOG, not_a_resume
    from replayer.core.session import registry

    try:
        fmt = args.format or registry.detect(Path(args.session).expanduser())
    except ReplayerError:
        fmt = None  # the replay itself says what is wrong with the file
    if fmt == PROMPT_LOG and args.mode != "session":
        raise ReplayerError(not_a_resume(args.session))
    if args.observed is None:
        if fmt != PROMPT_LOG:
            return None
        from replayer.core.session_observed import log_beside_folder

        found = log_beside_folder(args.session)
        if found is not None:
            print(f"replayer: observed side: {found}, the server's log beside the folder (--observed FILE to "
                  "give another)", file=sys.stderr)
        return None if found is None else str(found)
    if fmt != PROMPT_LOG:
        raise ReplayerError("--observed reads the server log of a --log-prompts-dir folder; "
                            f"{args.session} is not one (a traffic log carries its own observed side)")
    from replayer.core.record.server_log import read_server_log

    read_server_log(args.observed)
    return args.observed


def cmd_replay(args: argparse.Namespace) -> int:
    from replayer.core.engine import events as ev
    from replayer.core.pipeline import Replay

    if args.calibrate and args.engine != "live" and _traffic_log(args.session):
        return _calibrate_log(args, _config(args))
    _calibration_flags(args)
    cfg = _config(args)
    if args.repro:
        from replayer.core.repro import check_destination

        if args.mode != "session" or args.app or args.screenshot:
            raise ReplayerError("--repro writes the requests of a session replay: use it with --mode session, "
                                "without --app or --screenshot")
        check_destination(args.repro)  # before the replay, not after an hour of it
    if args.mode == "resume" and (args.freeze_system_prompt or args.keep_reasoning):
        flag = "--freeze-system-prompt" if args.freeze_system_prompt else "--keep-reasoning"
        raise ReplayerError(f"{flag} is a what-if of --mode session")
    observed = _prompt_folder_checks(args)
    if observed != cfg.observed:  # the server's log found beside a prompt folder
        cfg = dataclasses.replace(cfg, observed=observed)
    if args.mode == "resume" and args.server_args is not None:
        raise ReplayerError("--server-args goes with --mode session (the resume is one request on one slot)")
    if args.screenshot and (args.json or args.jsonl or args.markdown):
        raise ReplayerError("--screenshot saves the app's picture; it does not go with --json, --jsonl or --markdown")
    if args.mode == "session" and (args.app or args.screenshot):
        return _replay_session_app(args, cfg)
    rp = Replay(args.session, cfg, mode=args.mode, freeze_system=args.freeze_system_prompt,
                keep_reasoning=args.keep_reasoning, server_args=getattr(args, "server_args", None))
    rp.prepare()
    if args.app or args.screenshot:
        return _replay_app(args, rp.prepared)
    if cfg.calibrate and cfg.engine != "live":  # (was dropped silently: a simulated run times nothing)
        raise ReplayerError("--calibrate fits a cost line on live runs (--engine live) or on the timings a "
                            f"traffic log recorded (replayer record); {Path(args.session).name} is not a traffic log")
    if args.jsonl:
        _jsonl_notes(rp.prepared.meta())
    done = rp.run(on_event=(lambda e: _out(ev.to_json(e))) if args.jsonl else None,
                  speed=args.speed if args.jsonl else None)  # --speed paces the stream; None or 0: instant
    for note in done.notes:
        print(note, file=sys.stderr)
    if args.repro:
        from replayer.core.repro import write_bundle

        print(f"reproduction written to {write_bundle(args.repro, rp.prepared, dict(zip('AB', done.runs)))}",
              file=sys.stderr)
    if not args.jsonl:
        _out(done.report("json" if args.json else "md" if args.markdown else "text").decode())
    return 1 if done.failed else 0


def _jsonl_notes(meta: dict[str, Any]) -> None:
    """The stream's first record when the session was read in part (otherwise the stream starts
    with ``run_started``, as before): a consumer sees it before any event of the replay."""
    if meta["incomplete"]:
        _out(orjson.dumps({"type": "session_notes", "notes": meta["notes"], "incomplete": meta["incomplete"]}))


def _replay_app(args: argparse.Namespace, target) -> int:
    """``replay … --app`` / ``--screenshot``: the app opened on a resume (``Prepared``) or a session
    replay (``SessionSpec``)."""
    if args.screenshot and (args.json or args.jsonl or args.markdown):
        raise ReplayerError("--screenshot saves the app's picture; it does not go with --json, --jsonl or --markdown")
    from replayer.ui.app import DEFAULT_APP_SPEED, run_replay_app

    # a headless picture has nobody to watch the animation: instant unless --speed says otherwise
    speed = (0.0 if args.screenshot else DEFAULT_APP_SPEED) if args.speed is None else args.speed
    return run_replay_app(target, speed, screenshot=Path(args.screenshot).expanduser() if args.screenshot else None)


def _replay_session_app(args: argparse.Namespace, cfg) -> int:
    """``replay --mode session --app/--screenshot``: the session screen lays the turns out itself."""
    from replayer.core.session import load_session
    from replayer.ui.screens.session import SessionSpec

    # imported here, so a bad file is one line before any screen opens; the turns are laid out in the app
    session = load_session(args.session, cfg.format, images=cfg.images)
    server_args = None
    if args.server_args is not None:  # an unknown flag: one line too, not a screen
        from replayer.core.server.session import check_server_args

        server_args = check_server_args(args.server_args, cfg)
    return _replay_app(args, SessionSpec(Path(args.session), cfg, freeze_system=args.freeze_system_prompt,
                                         keep_reasoning=args.keep_reasoning, session=session,
                                         server_args=server_args))

