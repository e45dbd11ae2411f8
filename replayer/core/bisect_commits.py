"""Bisect by commit: the first commit of a llama.cpp repository where a session's prefill changed.

The report this project started from was bisected to a commit, not a build number. Given a
repository and two commits, the commits between them (``git rev-list --ancestry-path``) are
the candidates, oldest first, as indices for ``bisect.search`` — the same halving and the same
classification as a bisection over releases. Two things make it cheap:

- **The rules narrow it first.** Each commit's ``server-context.cpp`` is read with ``git show``
  (no checkout, no compile) and its generation detected (``source_rules``). When the two ends
  follow different rules, the live search runs only over the ends and the commits on either
  side of each change of rules — usually one build on each side.
- **Each step is a source build, cached by commit** (``manager.install_source`` on a
  ``git archive`` of the commit: the user's working tree is never checked out or touched).

When the ends follow the same rules (a change the rules do not capture), every commit is a
candidate, as ``git bisect`` would have it.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from replayer.core.bisect import BisectResult, LiveMeasure, Metric, StepReport, Threshold, search
from replayer.core.builds import source_rules
from replayer.core.builds.source import SourceSpec, check_tree, resolve_ref
from replayer.core.errors import ReplayerError

MAX_COMMITS = 100_000
_PR = re.compile(r"\(#(\d+)\)")


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ReplayerError(f"git {args[0]}: {(proc.stderr.strip().splitlines() or ['failed'])[-1][:200]}")
    return proc.stdout


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    @property
    def pr(self) -> int | None:
        m = _PR.search(self.subject)
        return int(m.group(1)) if m else None

    def describe(self) -> str:
        return f"{self.sha[:9]} {self.subject}" + (f" (PR #{self.pr})" if self.pr and "#" not in self.subject else "")


def commits_between(repo: Path, a: str, b: str) -> list[Commit]:
    """Both ends and every commit on the ancestry path between them, oldest first."""
    ca, cb = resolve_ref(str(repo), a)[1], resolve_ref(str(repo), b)[1]
    if ca == cb:
        raise ReplayerError("--good and --bad are the same commit")

    def is_ancestor(x: str, y: str) -> bool:
        return subprocess.run(["git", "merge-base", "--is-ancestor", x, y], cwd=repo,
                              stdin=subprocess.DEVNULL).returncode == 0

    old, new = (ca, cb) if is_ancestor(ca, cb) else (cb, ca) if is_ancestor(cb, ca) else (None, None)
    if old is None:
        raise ReplayerError(f"{a} and {b} are not one another's ancestors: nothing to bisect in a line")
    log = _git(repo, "log", "--reverse", "--ancestry-path", "--format=%H%x00%s", f"{old}..{new}")
    rows = [line.split("\0", 1) for line in log.splitlines() if line]
    if len(rows) > MAX_COMMITS:
        raise ReplayerError(f"{len(rows):,} commits between {a} and {b}: narrow the range")
    first = _git(repo, "log", "-1", "--format=%s", old).strip()
    return [Commit(old, first)] + [Commit(sha, subj) for sha, subj in rows]


def rules_of_commit(repo: Path, sha: str) -> str | None:
    """The generation ``server-context.cpp`` of ``sha`` follows, read without a checkout."""
    try:
        text = _git(repo, "show", f"{sha}:{source_rules.SERVER_FILE}")
    except ReplayerError:
        return None
    gen = source_rules.detect_text(text).generation
    return gen.value if gen else None


def narrowed(rules: list[str | None]) -> list[int]:
    """The indices worth building: both ends, and both sides of every change of rules — or all
    of them, when the ends follow the same rules (or rules that cannot be read)."""
    n = len(rules)
    if rules[0] is None or rules[-1] is None or rules[0] == rules[-1]:
        return list(range(n))
    keep = {0, n - 1}
    for i in range(1, n):
        if rules[i] != rules[i - 1]:
            keep |= {i - 1, i}
    return sorted(keep)


@dataclass
class CommitBisect:
    commits: list[Commit]
    rules: list[str | None]
    result: BisectResult
    good: int
    bad: int
    built: list[str] = field(default_factory=list)

    def answer(self) -> dict[str, Any]:
        f = self.result.found
        if f is None:
            return {}
        new, old = self.commits[f.first_new], self.commits[f.last_old]
        kind = ("first_bad", "last_good") if self.good < self.bad else ("first_good", "last_bad")
        return {kind[0]: {"commit": new.sha, "subject": new.subject, "pr": new.pr, "rules": self.rules[f.first_new]},
                kind[1]: {"commit": old.sha, "subject": old.subject, "pr": old.pr, "rules": self.rules[f.last_old]}}

    def to_dict(self) -> dict[str, Any]:
        return {"engine": "live", "by": "commit", "metric": self.result.metric.name, **self.answer(),
                "undecided": self.result.undecided, "commits": len(self.commits), "built": self.built,
                "steps": [dict(s.to_dict(), commit=self.commits[s.build].sha) for s in self.result.steps]}

    def summary_lines(self) -> list[str]:
        if self.result.undecided:
            return [f"undecided: {self.result.undecided}"]
        ans = self.answer()
        if not ans:
            return ["not finished"]
        lines = []
        for key, c in ans.items():
            lines.append(f"{key.replace('_', ' ')}: {c['commit'][:9]} {c['subject']}"
                         + (f" (PR #{c['pr']})" if c["pr"] and f"#{c['pr']}" not in c["subject"] else "")
                         + (f"  [rules: {c['rules']}]" if c["rules"] else ""))
        return lines


def live(session: str | Path, config, repo: str | Path, good: str, bad: str, metric_: Metric, model: Path, *,
         backend: str = "cpu", thr: Threshold = Threshold(), ctx_size: int | None = None,
         timeout: float | None = None, on_step: Callable[[StepReport], None] | None = None,
         on_progress: Callable[[int, str, float], None] | None = None) -> CommitBisect:
    """Bisect the commits between ``good`` and ``bad`` of ``repo`` with live replays of ``session``."""
    from replayer.core.builds import manager

    repo = check_tree(Path(repo))
    commits = commits_between(repo, good, bad)
    rules = [rules_of_commit(repo, c.sha) for c in commits]
    shas = [c.sha for c in commits]
    gi = shas.index(resolve_ref(str(repo), good)[1])
    bi = shas.index(resolve_ref(str(repo), bad)[1])
    built: list[str] = []

    def spec_of(i: int, progress) -> str:
        rec = manager.install_source(SourceSpec(url=str(repo), ref=commits[i].sha), backend, progress)
        built.append(commits[i].sha)
        return rec.identity or ""  # labels can repeat (two trees with local changes); identities do not

    kw: dict[str, Any] = {"backend": backend, "ctx_size": ctx_size, "on_progress": on_progress}
    if timeout is not None:
        kw["timeout"] = timeout
    measure = LiveMeasure.for_session(session, config, metric_, model, spec_of=spec_of, **kw)
    eff = thr if metric_.noisy else dataclasses.replace(thr, max_samples=1)
    res = search(narrowed(rules), gi, bi, measure, eff, engine="live", metric_=metric_, on_step=on_step)
    return CommitBisect(commits, rules, res, gi, bi, built)
