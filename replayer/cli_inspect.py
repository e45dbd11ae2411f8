"""``replayer inspect``: what a session holds and what its resume request is, always with counts.

One command module of the CLI, as each is; a session the replay must refuse
still gets its counts, with a ``replay refused:`` line.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from replayer.cli_args import out as _out, print_json as _json
from replayer.core.errors import ReplayerError


def cmd_inspect(args: argparse.Namespace) -> int:
    from replayer.core.session import load_session
    from replayer.core.session.request import request_from_files
    from replayer.core.session.turns import MAIN, earlier_turns, session_threads

    s = load_session(args.session, args.format)
    req = request_from_files(s, args.system_prompt, args.tools)
    if args.request:
        _out(orjson.dumps(_text_masked(req.body), option=orjson.OPT_INDENT_2))
        return 0
    n_tokens, n_starts, refused = _inspect_layout(req, s.n_chars)
    threads = session_threads(s, req, args.session)  # first: a thread left out adds its note
    info = {
        "path": s.path, "format": s.format, "format_version": s.format_version, "agent_version": s.agent_version,
        "session_id": s.session_id, "title": _text_masked({"title": s.title})["title"], "model": s.model,
        "provider": s.provider,
        "messages": len(s.messages), "roles": s.role_counts(), "tool_calls": s.n_tool_calls,
        "tool_results": s.n_tool_results, "tool_calls_recovered": s.stats.recovered_tool_calls,
        "tool_results_recovered": s.stats.recovered_tool_results, "compactions_applied": s.stats.compactions_applied,
        "compactions_in_file": s.stats.compactions_total,
        "turns_before_compaction": sum(map(len, earlier_turns(s))), "branch_length": s.stats.branch_length,
        "entries": s.stats.entries_total, "dropped_turns": s.stats.dropped_turns,
        "synthetic_results": s.stats.synthetic_results, "bad_lines": s.stats.bad_lines,
        "unknown_types": s.stats.unknown_types, "characters": s.n_chars, "estimated_tokens": n_tokens,
        "user_starts": n_starts, "system_prompt_stored": s.system_prompt is not None,
        "orphan_results": s.stats.orphan_results, "image_placeholders": s.stats.image_placeholders,
        "replay_refused": refused,
        "tools_stored": s.tools is not None, "missing": req.missing, "warnings": s.warnings + req.notes,
        # the main thread's count holds the requests sent before a compaction (Session.earlier)
        "turns": s.stats.entries_total if s.format in ("chat-requests", "traffic-log") else threads[MAIN],
        "threads": threads,
    }
    if len(info["threads"]) > 1:
        info["turns"] = sum(info["threads"].values())
    if args.json:
        _json(info)
        return 0
    if args.markdown:
        from replayer.core.export import inspect_markdown

        _out(inspect_markdown(info))
        return 0
    _out(_inspect_text(s, info, req))
    return 0



def _version_label(version: str | None) -> str:
    """" v3" for a numbered format version (pi's header), " (subagent)" for a kind of file that
    is named, not numbered (Codex's wrapped rollouts, a Cline or Qwen Code subagent's file)."""
    if not version:
        return ""
    return f" v{version}" if version[:1].isdigit() else f" ({version})"

def _inspect_text(s, info: dict[str, Any], req) -> str:
    """``inspect``'s terminal lines, from the facts its ``--json`` prints."""
    refused, n_tokens, n_starts = info["replay_refused"], info["estimated_tokens"], info["user_starts"]
    roles = ", ".join(f"{k} {v}" for k, v in info["roles"].items())
    lines = [
        f"{s.path}",
        f"  format         {s.format}{_version_label(s.format_version)}"
        f"{'  (agent ' + s.agent_version + ')' if s.agent_version else ''}",
        f"  model          {s.provider or '?'} / {s.model or '?'}",
        f"  messages       {len(s.messages)}  ({roles})",
        f"  turns          {info['turns']}  (requests the agent sent; replay --mode session)",
        f"  threads        {len(info['threads'])}: " + ", ".join(f"{k} {v}" for k, v in info["threads"].items()),
        f"  tool calls     {s.n_tool_calls}, results {s.n_tool_results}" + (
            f"  ({s.stats.recovered_tool_calls} calls and {s.stats.recovered_tool_results} results recovered "
            "from parallel branches)" if s.stats.recovered_tool_calls or s.stats.recovered_tool_results else ""),
        f"  compactions    {s.stats.compactions_applied} applied of {s.stats.compactions_total} in file" + (
            f"  ({info['turns_before_compaction']} turns sent before them rebuilt)"
            if info["turns_before_compaction"] else ""),
        f"  branch         {s.stats.branch_length} entries on the active path of {s.stats.entries_total}",
        f"  characters     {s.n_chars:,}",
        f"  tokens (est.)  {n_tokens:,}  with {n_starts} user/tool-result starts (chatml)" if refused is None
        else f"  tokens (est.)  ~{n_tokens:,}  (characters / 4: the template cannot render this request)",
    ]
    if s.stats.dropped_turns:
        lines.append(f"  dropped        {s.stats.dropped_turns} aborted/errored assistant turns")
    for w in s.warnings + req.notes:
        lines.append(f"  note: {w}")
    if refused is not None:
        lines.append(f"  replay refused: {refused.removeprefix('llama-server refuses this request: ')}")
    return "\n".join(lines)


def _inspect_layout(req: Any, n_chars: int) -> tuple[int, int, str | None]:
    """Estimated tokens and user starts of the resume request; for a request llama-server would
    refuse, characters / 4, no starts and the reason (inspect still reports the file's counts)."""
    from replayer.core.prompt import templates
    from replayer.core.prompt.layout import compute_layout

    try:
        lay = compute_layout(req.messages, req.body.get("tools"), template=templates.bundled("chatml"))
    except ReplayerError as exc:
        return n_chars // 4, 0, str(exc)
    return lay.n_tokens, len(lay.user_starts), None


def _text_masked(obj: Any) -> Any:
    """Message text replaced by its length when ``--redact-text`` asks for it."""
    from replayer.core import redact

    return redact.mask_message_text(obj) if redact.policy().text else obj


