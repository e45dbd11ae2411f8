"""A ``--log-prompts-dir`` folder written by llama-server: every prompt it was asked to process, in order.

The server writes one file per completion request, after the chat conversion and the
template (so chat, Anthropic and Responses requests alike), named by its clock in
milliseconds: ``%012d.txt`` of ``ggml_time_ms()`` holding the prompt string
(tools/server/server-context.cpp:4096-4104 in 9859, :4281-4289 in 10865). Sorting the names
is sorting the requests. A prompt is the text the server tokenized, so its token count with
the model's own tokenizer (special tokens parsed, BOS as the model adds it) is the server's
``cache_n + prompt_n`` for that request — no template involved. Builds before the folder is
created by the server (9859 common/arg.cpp:3453 only stores the path; 10865 creates it)
write nothing into a folder that does not exist.

This is read-only and bounded: files that are not the server's are skipped with a warning,
and a folder of more than ``MAX_FILES`` prompts or a prompt over ``MAX_PROMPT_BYTES`` is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from replayer.core.errors import ImportFailed
from replayer.core.session.model import Message, Session
from replayer.core.session.registry import Head, Importer

NAME = re.compile(r"\d{12}\.txt")
MAX_FILES = 100_000
MAX_PROMPT_BYTES = 64 * 1024 * 1024


@dataclass
class PromptLog:
    folder: Path
    names: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def token_counts(self, gguf: str | Path) -> list[int]:
        """Each prompt's tokens as the server counts them, with the GGUF's own tokenizer."""
        from replayer.core.prompt import gguf_tokenizer

        tok = gguf_tokenizer.load(str(gguf))
        return [len(tok.encode(p, add_special=True)) for p in self.prompts]


def is_prompt_log(folder: Path) -> bool:
    """A folder holding at least one file named as the server names them."""
    try:
        return folder.is_dir() and any(NAME.fullmatch(p.name) for p in folder.iterdir())
    except OSError:
        return False


def read_prompt_log(folder: str | Path) -> PromptLog:
    d = Path(folder).expanduser()
    if not d.is_dir():
        raise ImportFailed(f"{d} is not a folder (give the --log-prompts-dir folder)")
    try:
        entries = sorted(d.iterdir())
    except OSError as exc:
        raise ImportFailed(f"cannot read {d}: {exc.strerror or exc}") from None
    files = [p for p in entries if NAME.fullmatch(p.name) and p.is_file()]
    log = PromptLog(d)
    if len(entries) > len(files):
        log.warnings.append(f"skipped {len(entries) - len(files)} entries not named as llama-server names its prompts")
    if not files:
        raise ImportFailed(f"{d} holds no prompt files (llama-server writes NNNNNNNNNNNN.txt)")
    if len(files) > MAX_FILES:
        raise ImportFailed(f"{d} holds {len(files)} prompts; at most {MAX_FILES} are read")
    for p in files:
        if p.stat().st_size > MAX_PROMPT_BYTES:
            raise ImportFailed(f"{p} is over {MAX_PROMPT_BYTES >> 20} MiB: not a prompt")
        data = p.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", "replace")
            log.warnings.append(f"{p.name} is not valid UTF-8 (read with replacement characters)")
        log.names.append(p.name)
        log.prompts.append(text)
    return log


FORMAT = "prompt-log"


def load(path: Path, *, images: str = "omit") -> Session:
    """The folder as a session: its prompts are the turns (``session.turns`` lays them out as
    they are, no template). The ``Session`` holds the last prompt as one user message, for
    ``inspect`` and the listing; the resume mode refuses the folder (it is not a conversation)."""
    log = read_prompt_log(path)
    s = Session(format=FORMAT, path=str(path), title=f"{len(log.prompts)} prompts of llama-server",
                messages=[Message(role="user", content=log.prompts[-1])])
    s.stats.lines = s.stats.entries_total = len(log.prompts)
    s.warnings.extend(log.warnings)
    return s


def detect_head(head: Head) -> float:
    return 0.9 if head.is_dir and is_prompt_log(head.path) else 0.0


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images))
