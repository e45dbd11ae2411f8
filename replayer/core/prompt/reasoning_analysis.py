"""Whether llama-server finds thinking support in a template: ``enable_thinking``'s default.

The server passes ``enable_thinking`` true to the template only when the template "supports
thinking" (``server-context.cpp:1596-1597`` of b11434, ``:1458-1459`` of b10001,
``:1519`` of b9859; ``common_chat_templates_support_enable_thinking``, chat.cpp:358-371 of
b11434): a specialised handler says so itself (``data.supports_thinking``), and every other
template goes to the generic auto-parser, whose reasoning analysis (``analyze_reasoning``,
common/chat-diff-analyzer.cpp:461-700 of b11434, identical in b9859 and b10001) renders the
template on probe conversations and diffs the outputs. Thinking is supported when that
analysis finds a reasoning mode (chat.cpp:1357 of b11434, :2772 of b10001).

This module is the analysis, ported on bytes as the C++ works on them: the marker segmenter
and the diff split (common/chat-auto-parser-helpers.cpp), the few PEG patterns the analysis
uses (``marker()``, ``space()``, ``literal``; common/peg-parser.cpp:1365) and the workarounds
that set a reasoning mode (chat-diff-analyzer.cpp:36-140). Rendering is the caller's: a
function from a template context to the text, or None when the template refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

Render = Callable[[dict[str, Any]], "str | None"]

USER_MSG = "U_USER_MSG Hello END_U"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
THINKING = "REASON_PART I am thinking END_R"
_FUN_FIRST, _FUN_SECOND = "FFF_FIRST_FUN_F", "SSS_SECOND_FUN_S"
_ARG_FIRST, _ARG_SECOND = "AA_ARG_FST_AA", "BB_ARG_SND_BB"

_WS = b" \t\n\v\f\r"  # C's isspace
TEXT, MARKER = 0, 1


def _params_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {
        _ARG_FIRST: {"type": "string", "description": "First argument"},
        _ARG_SECOND: {"type": "string", "description": "Second argument"}}, "required": []}


def probe_tools() -> list[dict[str, Any]]:
    """The analysis' two tools (chat-diff-analyzer.cpp:205-224 of b11434)."""
    return [{"type": "function", "function": {"name": name, "description": desc, "parameters": _params_schema()}}
            for name, desc in ((_FUN_FIRST, "Test function foo"), (_FUN_SECOND, "Test function bar"))]


# -- helpers: chat-auto-parser-helpers.cpp ---------------------------------------------------

def trim(b: bytes) -> bytes:
    return b.strip(_WS)


def segmentize(text: bytes) -> list[tuple[int, bytes]]:
    """``segmentize_markers``: ``<…>`` and ``[…]`` runs are markers, the rest text."""
    out: list[tuple[int, bytes]] = []
    in_marker, closer, last = False, 0, 0
    for i, c in enumerate(text):
        if not in_marker and c in (0x3C, 0x5B):  # < [
            if last < i:
                out.append((TEXT, text[last:i]))
            last, in_marker, closer = i, True, 0x3E if c == 0x3C else 0x5D
        elif in_marker and c == closer:
            out.append((MARKER, text[last:i + 1]))
            last, in_marker = i + 1, False
    if last < len(text):
        out.append((TEXT, text[last:]))
    return out


def prune(segments: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """``prune_whitespace_segments``."""
    return [s for s in segments if trim(s[1])]


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[len(a) - 1 - i] == b[len(b) - 1 - i]:
        i += 1
    return i


@dataclass
class Diff:
    prefix: bytes = b""
    suffix: bytes = b""
    left: bytes = b""
    right: bytes = b""


def _segment_ends(ls_: list, rs_: list) -> tuple[int, int, int, int, bytes, bytes, bool, bool]:
    """The first phase of ``calculate_diff_split``: equal segments taken off both ends."""
    ls, le, rs, re_ = 0, len(ls_) - 1, 0, len(rs_) - 1
    prefix, suffix, lfull, rfull = b"", b"", False, False
    while ls != le and rs != re_:
        advanced = False
        if ls_[ls] == rs_[rs]:
            prefix += ls_[ls][1]
            ls, rs, advanced = ls + 1, rs + 1, True
        if ls_[le] == rs_[re_]:
            suffix = ls_[le][1] + suffix
            if ls != le:
                le -= 1
            else:
                lfull = True
            if rs != re_:
                re_ -= 1
            else:
                rfull = True
            advanced = True
        if not advanced:
            break
    if ls == le and rs != re_:
        if ls_[ls] == rs_[re_]:
            suffix, re_, lfull = rs_[re_][1] + suffix, re_ - 1, True
        elif ls_[ls] == rs_[rs]:
            prefix, rs, lfull = prefix + rs_[rs][1], rs + 1, True
    elif rs == re_ and ls != le:
        if ls_[le] == rs_[rs]:
            suffix, le, rfull = ls_[le][1] + suffix, le - 1, True
        elif ls_[ls] == rs_[rs]:
            prefix, ls, rfull = prefix + ls_[ls][1], ls + 1, True
    elif ls == le and rs == re_ and ls_[ls] == rs_[rs] and ls_[ls][0] == MARKER:
        prefix, lfull, rfull = prefix + rs_[rs][1], True, True
    return ls, le, rs, re_, prefix, suffix, lfull, rfull


def diff_split(left: bytes, right: bytes) -> Diff:
    """``calculate_diff_split`` (chat-auto-parser-helpers.cpp:83-199 of b11434)."""
    lsg, rsg = segmentize(left), segmentize(right)
    if not lsg:
        return Diff(right=right)
    if not rsg:
        return Diff(left=left)
    ls, le, rs, re_, prefix, suffix, lfull, rfull = _segment_ends(lsg, rsg)
    text_suffix = lsg[le][0] == TEXT and rsg[re_][0] == TEXT
    text_prefix = rsg[rs][0] == TEXT and lsg[ls][0] == TEXT
    rem_l = b"".join(s[1] for s in lsg[ls:le if lfull else le + 1])
    rem_r = b"".join(s[1] for s in rsg[rs:re_ if rfull else re_ + 1])
    sl = _common_suffix(rem_l, rem_r) if text_suffix else 0
    pl = _common_prefix(rem_l[:len(rem_l) - sl], rem_r[:len(rem_r) - sl]) if text_prefix else 0
    out = Diff(prefix + rem_l[:pl], rem_l[len(rem_l) - sl:] + suffix, rem_l[pl:len(rem_l) - sl],
               rem_r[pl:len(rem_r) - sl])
    if not out.left and not out.right:  # no difference: all of it is the prefix
        out.prefix, out.suffix = left, b""
    if not out.left and out.right and len(left) <= len(right) and right[:len(left)] == left:
        out.prefix, out.suffix, out.right = left, b"", right[len(left):]
    return out


# -- the PEG patterns the analysis uses (peg-parser.cpp) ----------------------------------------

def _marker(s: bytes, i: int) -> int | None:
    """``marker()``: ``<`` up to the first ``>``, or ``[`` up to the first ``]``; its end."""
    if i >= len(s) or s[i] not in (0x3C, 0x5B):
        return None
    j = s.find(b">" if s[i] == 0x3C else b"]", i + 1)
    return None if j < 0 else j + 1


def _space(s: bytes, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def wrapped(s: bytes, lit: bytes, space_in_post: bool) -> tuple[bytes, bytes] | None:
    """``tag(pre, marker + space) + literal + [space] tag(post, [space] marker + space)``, parsed
    anywhere (the first start that succeeds): (pre, post). ``space_in_post``: the space after
    the literal belongs to ``post`` (reasoning presence) or not (reasoning scope)."""
    for i in range(len(s)):
        m = _marker(s, i)
        if m is None:
            continue
        p = _space(s, m)
        if not s.startswith(lit, p):
            continue
        q = _space(s, p + len(lit))
        e = _marker(s, q)
        if e is None:
            continue
        post_start = p + len(lit) if space_in_post else q
        return s[i:p], s[post_start:_space(s, e)]
    return None


def delimited(s: bytes, lit: bytes) -> bytes | None:
    """``literal + space + optional(tag(post, marker + space))``, parsed anywhere: post (empty
    when no marker follows), or None when the literal is not there."""
    i = s.find(lit)
    if i < 0:
        return None
    q = _space(s, i + len(lit))
    e = _marker(s, q)
    return b"" if e is None else s[q:_space(s, e)]


# -- the analysis: analyze_reasoning ------------------------------------------------------

@dataclass
class Reasoning:
    mode: str = "none"  # none | tag_based | tools_only
    start: bytes = b""
    end: bytes = b""


def _context(messages: list[dict], enable_thinking: bool, gen: bool, tools: list | None,
             bos: str, eos: str) -> dict[str, Any]:
    """``autoparser::apply_template`` → ``common_chat_template_direct_apply``: the messages as
    given, the template's BOS/EOS, ``enable_thinking``, tools when there are some."""
    ctx: dict[str, Any] = {"messages": messages, "bos_token": bos, "eos_token": eos,
                           "enable_thinking": enable_thinking}
    if tools:
        ctx["tools"] = tools
    if gen:
        ctx["add_generation_prompt"] = True
    return ctx


def _pair(render: Render, a: dict, b: dict) -> tuple[bytes, bytes] | None:
    """``compare_variants``' two outputs, or None when either render fails."""
    out_a = render(a)
    if out_a is None:
        return None
    out_b = render(b)
    return None if out_b is None else (out_a.encode(), out_b.encode())


def _presence(r: Reasoning, render: Render, bos: str, eos: str) -> None:
    """``compare_reasoning_presence`` (chat-diff-analyzer.cpp:474-524 of b11434)."""
    user = {"role": "user", "content": USER_MSG}
    plain = {"role": "assistant", "content": ASSISTANT_MSG}
    think = dict(plain, reasoning_content=THINKING)
    got = _pair(render, _context([user, plain], True, False, None, bos, eos),
                _context([user, think], True, False, None, bos, eos))
    if got is None:
        return
    lit = THINKING.encode()
    d = diff_split(*got)
    if not d.right or lit not in d.right:
        return
    tags = wrapped(got[1], lit, space_in_post=True)
    if tags is not None:
        r.mode, r.start, r.end = "tag_based", tags[0], tags[1]
        return
    post = delimited(got[1], lit)
    if post:
        r.mode, r.end = "tag_based", post


def _tail_anchored(r: Reasoning, a: bytes, b: bytes) -> None:
    """Both sides differ: one output's last 64 bytes found in the other, followed by exactly
    two markers (chat-diff-analyzer.cpp:580-615 of b11434)."""
    for base, extended in ((b, a), (a, b)):
        n = min(len(base), 64)
        anchor = base[len(base) - n:]
        pos = extended.rfind(anchor)
        if pos < 0 or pos + n >= len(extended):
            continue
        extra = trim(extended[pos + n:])
        if not extra:
            continue
        seg = prune(segmentize(extra))
        if len(seg) == 2 and seg[0][0] == MARKER and seg[1][0] == MARKER:
            r.start = r.start or seg[0][1]
            r.end = r.end or seg[1][1]
            r.mode = "tag_based"
            return


def _thinking_enabled(r: Reasoning, render: Render, bos: str, eos: str) -> None:
    """``compare_thinking_enabled`` (chat-diff-analyzer.cpp:526-620 of b11434)."""
    user = [{"role": "user", "content": USER_MSG}]
    got = _pair(render, _context(user, False, True, None, bos, eos), _context(user, True, True, None, bos, eos))
    if got is None:
        return
    out_a, out_b = got
    d = diff_split(out_a, out_b)
    lt, rt = trim(d.left), trim(d.right)
    if not lt and d.right:
        if rt and out_b.endswith(rt) and not r.start:
            r.start, r.mode = d.right, "tag_based"
    elif not rt and d.left:
        if lt and out_a.endswith(lt) and not r.end:
            seg = prune(segmentize(out_a))
            if len(seg) >= 2 and seg[-1][1] == lt and seg[-2][0] == MARKER:
                r.start = seg[-2][1]
            r.end, r.mode = d.left, "tag_based"
    elif lt and rt:
        _tail_anchored(r, out_a, out_b)
    if r.mode == "none" and not r.start and r.end:
        r.mode = "tag_based"


def _scope(r: Reasoning, render: Render, bos: str, eos: str) -> None:
    """``compare_reasoning_scope`` (chat-diff-analyzer.cpp:622-680 of b11434): reasoning shown
    only on a turn with tool calls."""
    user = {"role": "user", "content": USER_MSG}
    with_content = {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING}
    call = {"id": "call00001", "type": "function",
            "function": {"name": _FUN_FIRST, "arguments": {_ARG_FIRST: "VVVV", _ARG_SECOND: "XXXX"}}}
    with_tools = {"role": "assistant", "content": None, "reasoning_content": THINKING, "tool_calls": [call]}
    tools = probe_tools()
    got = _pair(render, _context([user, with_content], True, False, tools, bos, eos),
                _context([user, with_tools], True, False, tools, bos, eos))
    if got is None:
        return
    lit = THINKING.encode()
    if lit in got[0] or lit not in got[1]:
        return
    r.mode = "tools_only"
    tags = wrapped(got[1], lit, space_in_post=False)
    if tags is not None:
        r.start, r.end = tags
        return
    post = delimited(got[1], lit)
    if post is None:
        r.mode = "none"
    else:
        r.end = post


def _workarounds(r: Reasoning, source: str) -> None:
    """The auto-parser's per-template patches that set a reasoning mode (chat-diff-analyzer.cpp:
    36-140 of b11434; the same in b9859 and b10001): old Qwen/DeepSeek thinking templates,
    Granite 3.3, Nemotron Nano v2."""
    if ("content.split('</think>')" in source and "reasoning_content" not in source
            and "<SPECIAL_12>" not in source and r.mode == "none"):
        r.mode, r.start, r.end = "tag_based", b"<think>", b"</think>"
    if "Write your thoughts between <think></think> and write your response between <response></response>" in source:
        r.mode, r.start, r.end = "tag_based", b"<think>", b"</think>"
    if all(t in source for t in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        r.mode, r.start, r.end = "tag_based", b"<think>\n", b"</think>"


def analyze(source: str, render: Render, *, supports_tool_calls: bool, bos: str = "", eos: str = "") -> Reasoning:
    """``analyze_reasoning`` and the workarounds after it (``autoparser::analyze_template``)."""
    r = Reasoning()
    _presence(r, render, bos, eos)
    _thinking_enabled(r, render, bos, eos)
    if supports_tool_calls:
        _scope(r, render, bos, eos)
    _workarounds(r, source)
    return r


# -- the specialised handlers, before the auto-parser ----------------------------------------

#: (first build read with it, detection, the handler's ``supports_thinking``), in the order of
#: ``common_chat_try_specialized_template`` (chat.cpp:1090-1228 of b11434, :2540-2650 of b10001,
#: b9859 alike). A handler only in b11434's sdist carries 11434: the earliest sdist read with it.
def _qwen3_coder(src: str) -> bool:
    return ("<tool_call>" in src and "<function=" in src and "<parameter=" in src
            and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in src)


_HANDLERS: tuple[tuple[int, Callable[[str], bool], Callable[[str], bool]], ...] = (
    (0, lambda s: "[SYSTEM_PROMPT]" in s and "[TOOL_CALLS]" in s and "[ARGS]" in s and "[CALL_ID]" not in s,
     lambda s: True),  # Ministral 3
    (11434, lambda s: "chat_format=llm-jp-harmony-v1" in s, lambda s: True),
    (0, lambda s: "<|channel|>" in s, lambda s: True),  # GPT-OSS
    (11434, lambda s: "<atem:function_calls>" in s and "<|eom|>" in s, lambda s: True),  # Muse Glimmer
    (0, lambda s: ">>>all" in s and ">>>${recipient}" in s, lambda s: False),  # Functionary v3.2
    (0, lambda s: "<|tool_calls_section_begin|>" in s and "<|tool_call_begin|>" in s, lambda s: True),  # Kimi K2
    (11434, lambda s: "<|open|>" in s and "<|close|>" in s and "<|end_of_msg|>" in s, lambda s: True),  # Kimi K3
    (11434, lambda s: "<role>ASSISTANT</role>" in s and "<arg_key>" in s, lambda s: True),  # Ling 3.0
    (0, lambda s: "<|START_TEXT|>" in s and "<|START_ACTION|>" in s, lambda s: True),  # Cohere2 MoE
    (0, lambda s: "<|tool_list_start|>" in s and "<|tool_list_end|>" in s, lambda s: True),  # LFM2
    (0, lambda s: "List of tools: [" in s and "<|tool_list_start|>" not in s, lambda s: True),  # LFM2.5
    (0, lambda s: "<|role_sep|>" in s and "<|message_sep|>" in s and "<|function_call|>" not in s,
     lambda s: False),  # GigaChat V3
    (11434, lambda s: "]<]minimax[>[" in s and "<tool_call>" in s and "<invoke name=" in s, lambda s: True),
    (11434, lambda s: "dsml_token" in s and "DSML" in s and ("function_calls" in s or "tool_calls" in s),
     lambda s: True),  # DeepSeek V3.2/V4 (b11434: V4's "tool_calls" too)
    (0, lambda s: "dsml_token" in s and "function_calls" in s and "DSML" in s, lambda s: True),  # (b10001)
    (0, lambda s: "'<|tool_call>call:'" in s, lambda s: True),  # Gemma 4
    (0, lambda s: "Tool usage guidelines:" in s and '<function name="' in s and '<param name="' in s,
     lambda s: True),  # MiniCPM5
    (11434, _qwen3_coder, lambda s: "<think>" in s),  # Qwen3-Coder: thinking when it writes <think>
)


def handler_thinking(source: str, build_number: int | None) -> bool | None:
    """A specialised handler's ``supports_thinking`` for this template on this build, or None
    when no handler takes it (the auto-parser decides)."""
    for since, matches, thinking in _HANDLERS:
        if (build_number is None or build_number >= since) and matches(source):
            return thinking(source)
    return None
