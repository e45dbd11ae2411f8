"""What replayer writes out never carries the user's keys or home folder unless asked to.

Every output — CLI text and JSON, exports (JSON, JSONL, Markdown, CSV), SVG screenshots —
passes through :func:`redact`, because a session's path, title, notes and messages can hold
API keys and reports get pasted into public issues. The policy is process-wide: on by default
for keys and paths, ``--no-redact`` turns it off, ``--redact-text`` also masks message text
(for a report shared in public that must not show the conversation).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

MASK = "[REDACTED]"

#: key formats of the common providers and hosts; each match is replaced whole
_KEYS = [
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",  # OpenAI, Anthropic
    r"\bhf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",  # GitHub classic, OAuth, app, refresh
    r"\bglpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"\bAIza[0-9A-Za-z_-]{35}",  # Google
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT (header.payload.signature)
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
]
_KEY_RE = re.compile("|".join(f"(?:{k})" for k in _KEYS))
#: Authorization header values and user:password@ in URLs (the scheme word is kept); a credential
#: holds a digit, a symbol or mixed case, so prose ("basic understanding") is left alone
_CRED = r"(?=\S*(?:[0-9+/=._~-]|[a-z]\S*[A-Z]|[A-Z]\S*[a-z]\S*[A-Z]))[A-Za-z0-9._~+/=-]{12,}"
_AUTH_RE = re.compile(r"\b([Bb]earer|Basic)(\s+)" + _CRED)
_URL_CRED_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:\"'<>]+:[^\s/@\"'<>]+@")
#: name = value assignments of secrets (env files, configs, command lines): the name ends with
#: the keyword (``n_tokens``, ``tokenizer`` are not secrets) and the value is not a number
_ASSIGN_RE = re.compile(
    r"(?i)\b([A-Za-z0-9_]*(?:api[_-]?key|access[_-]?key|secret(?:[_-]?key)?|token|passw(?:or)?d|passwd))\b"
    r"(\\?[\"']?\s*[:=]\s*\\?[\"']?)(?![0-9.eE+-]+(?:[\s\"',;&\\]|$))([^\s\"',;&\\]{8,})")
#: the same secrets as command-line options (``--aws-secret-access-key VALUE``)
_FLAG_RE = re.compile(r"(?i)(--[a-z0-9-]*(?:api-key|access-key|secret|token|password)[a-z0-9-]*)(\s+|=)"
                      r"(?![0-9.eE+-]+(?:\s|$))(?!--)([^\s\"',;&\\]{8,})")
#: an AWS key id written next to its secret (``AKIA…:wJalr…``, ``AKIA… = wJalr…``): the pair
#: masked whole, since once the id is masked the secret has no name left to be found by
_AWS_PAIR_RE = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b[\"']?(?:\s*[:=,]\s*|\s+)[\"']?"
                          r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


@dataclass
class Policy:
    keys: bool = True
    paths: bool = True
    text: bool = False  # message text (``--redact-text``)


_policy = Policy()


def set_policy(*, redact: bool = True, text: bool = False) -> Policy:
    """The CLI's ``--no-redact`` / ``--redact-text`` for the rest of this process."""
    _policy.keys = _policy.paths = redact
    _policy.text = text
    return _policy


def policy() -> Policy:
    return _policy


def _home_re(home: str) -> re.Pattern[str] | None:
    home = home.rstrip("/")
    if not home:
        return None
    # at a path boundary on both sides: /home/al must not touch /home/alice or /x/home/al
    return re.compile(r"(?<![\w.~/-])" + re.escape(home) + r"(?![\w.-])")


def redact(text: str, pol: Policy | None = None) -> str:
    """Keys and the home folder masked, as the policy says."""
    pol = pol or _policy
    if pol.keys:
        text = _AWS_PAIR_RE.sub(MASK, text)
        text = _KEY_RE.sub(MASK, text)
        text = _URL_CRED_RE.sub(lambda m: f"{m.group(1)}{MASK}@", text)
        text = _AUTH_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
        text = _ASSIGN_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
        text = _FLAG_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    if pol.paths and (home_re := _home_re(os.path.expanduser("~"))) is not None:
        text = home_re.sub("~", text)
    return text


def redact_bytes(data: bytes, pol: Policy | None = None) -> bytes:
    pol = pol or _policy
    if not (pol.keys or pol.paths):
        return data
    return redact(data.decode("utf-8", errors="surrogateescape"), pol).encode("utf-8", errors="surrogateescape")


def mask_text(text: str) -> str:
    return f"[text: {len(text):,} characters]"


#: fields of a chat request (and of a session's summary) whose strings are message text
_TEXT_FIELDS = {"content", "text", "reasoning_content", "reasoning", "reasoning_text", "thinking", "arguments",
                "title", "system_prompt", "summary", "description", "value"}


def mask_message_text(obj: Any) -> Any:
    """A copy with every message-text string replaced by its length (``--redact-text``):
    roles, ids, tool names and the structure stay, so a report still shows the shape."""
    if isinstance(obj, dict):
        return {k: (mask_text(v) if isinstance(v, str) and k in _TEXT_FIELDS else mask_message_text(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [mask_message_text(v) for v in obj]
    return obj
