"""Builds from source without compiling: the tree, the ref, the patches, the rules, bad input.

A small stand-in llama.cpp tree (the three files that mark one, and a server-context.cpp
holding the statements the rules are read from) in a real git repository. The real trees —
the sdists of seven releases, compiled and run — are ``test_source_builds_live.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from replayer.core.builds import source, source_rules
from replayer.core.builds.source import SourceError, SourceSpec

G1_LOOP = """
    for (; slot.prompt.n_tokens() < slot.task->n_tokens(); ) {
        slot.prompt.tokens.push_back(cur_tok);
        // stop the prompt batch exactly before a user message
        if (spans.is_user_start(slot.prompt.n_tokens())) {
            break;
        }
    }
    do_checkpoint = do_checkpoint && (slot.prompt.checkpoints.empty() || is_last_user_message || n_tokens_start > x);
"""
G2A_LOOP = """
    for (; slot.prompt.n_tokens() < slot.task->n_tokens(); ) {
        slot.prompt.tokens.push_back(cur_tok);
        if (do_checkpoint && spans.is_user_start(slot.prompt.n_tokens())) {
            break;
        }
    }
    do_checkpoint = do_checkpoint && (slot.prompt.checkpoints.empty() || is_last_user_message || n_tokens_start > x);
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def write_tree(root: Path, loop: str) -> Path:
    (root / "include").mkdir(parents=True, exist_ok=True)
    (root / "tools" / "server").mkdir(parents=True, exist_ok=True)
    (root / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    (root / "include" / "llama.h").write_text("// llama\n")
    (root / "tools" / "server" / "server-context.cpp").write_text(loop)
    return root


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(tmp_path / "builds"))
    r = write_tree(tmp_path / "llama.cpp", G1_LOOP)
    git(r, "init", "-q", "-b", "master")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "regression")
    git(r, "tag", "v1")
    (r / "tools" / "server" / "server-context.cpp").write_text(G2A_LOOP)
    git(r, "commit", "-qam", "server : break only where a checkpoint is due (#25420)")
    return r


def _patch(repo: Path, tmp_path: Path) -> Path:
    p = tmp_path / "fix.diff"
    p.write_text(git(repo, "diff", "v1", "master"))
    return p


def test_the_rules_are_read_from_the_code_not_its_comments_or_layout():
    assert source_rules.detect_text(G1_LOOP).generation.value == "G1"
    assert source_rules.detect_text(G2A_LOOP).generation.value == "G2a"
    squeezed = G1_LOOP.replace("\n        ", " ").replace("// stop the prompt batch exactly before a user message", "")
    assert source_rules.detect_text("/* if (do_checkpoint && spans.is_user_start(x)) */" + squeezed
                                    ).generation.value == "G1"
    commented = G1_LOOP.replace("if (spans.is_user_start", "// if (spans.is_user_start")
    d = source_rules.detect_text(commented)
    assert d.generation is None and d.user_breaks is None and "live runs only" in d.describe()


def test_a_working_tree_is_copied_and_named_by_its_commit_and_local_changes(repo, tmp_path):
    head = git(repo, "rev-parse", "HEAD").strip()
    a = source.materialize(SourceSpec(tree=repo), tmp_path / "w1")
    b = source.materialize(SourceSpec(tree=repo), tmp_path / "w2")
    assert a.identity == b.identity and a.label == head[:9] and a.build_number == 2
    assert (a.tree / "tools/server/server-context.cpp").read_text() == G2A_LOOP
    assert source_rules.detect(a.tree).generation.value == "G2a"
    (repo / "tools" / "server" / "server-context.cpp").write_text(G1_LOOP)  # a local change, not committed
    c = source.materialize(SourceSpec(tree=repo), tmp_path / "w3")
    assert c.identity != a.identity and c.label == head[:9] + "+local" and c.origin["local_changes"]
    assert source_rules.detect(c.tree).generation.value == "G1"
    # the user's checkout is as it was: same HEAD, same change, nothing added
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "status", "--porcelain").strip() == "M tools/server/server-context.cpp"


def test_git_refs_resolve_by_branch_tag_and_commit_and_a_missing_one_is_one_line(repo, tmp_path):
    url = str(repo)
    first = git(repo, "rev-parse", "v1").strip()
    assert source.resolve_ref(url, "v1")[1] == first
    assert source.resolve_ref(url, "master")[1] == git(repo, "rev-parse", "master").strip()
    assert source.resolve_ref(url, first)[1] == first
    m = source.materialize(SourceSpec(url=url, ref="v1"), tmp_path / "w")
    assert m.identity and m.label == first[:9] and m.origin["subject"] == "regression"
    assert source_rules.detect(m.tree).generation.value == "G1"
    with pytest.raises(SourceError, match="no ref 'nope' in"):
        source.resolve_ref(url, "nope")
    with pytest.raises(SourceError, match="is not a git ref"):
        source.resolve_ref(url, "--upload-pack=touch /tmp/x")


def test_a_patch_moves_the_tree_to_the_fixed_rules_and_one_that_does_not_apply_names_its_hunk(repo, tmp_path):
    fix = _patch(repo, tmp_path)
    m = source.materialize(SourceSpec(url=str(repo), ref="v1", patches=(fix,)), tmp_path / "w")
    assert source_rules.detect(m.tree).generation.value == "G2a"
    plain = source.materialize(SourceSpec(url=str(repo), ref="v1"), tmp_path / "w0")
    assert m.identity != plain.identity and m.label.endswith("+fix") and m.origin["patches"][0]["name"] == "fix.diff"
    with pytest.raises(SourceError, match=r"patch fix.diff does not apply: hunk at tools/server/server-context.cpp:\d+"):
        source.materialize(SourceSpec(url=str(repo), ref="master", patches=(fix,)), tmp_path / "w2")


def _cli(*args: str, env_dir: Path) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "REPLAYER_BUILDS_DIR": str(env_dir)}
    return subprocess.run([sys.executable, "-m", "replayer.cli", "builds", "install", *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.parametrize("case", ["not-llama", "no-ref", "bad-patch", "no-patch-file"])
def test_bad_sources_are_one_line_and_leave_the_cache_as_it_was(repo, tmp_path, case):
    builds = tmp_path / "cache"
    (tmp_path / "plain").mkdir()
    fix = _patch(repo, tmp_path)
    args = {"not-llama": ["--source", str(tmp_path / "plain")],
            "no-ref": ["--git", str(repo), "--ref", "does-not-exist"],
            "bad-patch": ["--source", str(repo), "--patch", str(fix)],  # HEAD already has it
            "no-patch-file": ["--source", str(repo), "--patch", str(tmp_path / "missing.diff")]}[case]
    before = sorted(p.name for p in builds.rglob("*")) if builds.exists() else []
    proc = _cli(*args, env_dir=builds)
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.splitlines() if x.startswith("replayer: error:")]
    assert "Traceback" not in proc.stderr and len(lines) == 1
    assert {"not-llama": "is not a llama.cpp source tree (no CMakeLists.txt)", "no-ref": "no ref 'does-not-exist'",
            "bad-patch": "patch fix.diff does not apply: hunk at tools/server/server-context.cpp",
            "no-patch-file": "no such patch file"}[case] in lines[0]
    after = sorted(p.name for p in builds.rglob("*") if "git" not in p.parts and "locks" not in p.parts) \
        if builds.exists() else []
    assert after == [p for p in before if p not in ("git", "locks")]


def test_commits_between_two_ends_come_oldest_first_with_the_rules_each_follows(repo):
    from replayer.core import bisect_commits as bc

    for a, b in (("v1", "master"), ("master", "v1")):
        commits = bc.commits_between(repo, a, b)
        assert [c.subject for c in commits] == ["regression", "server : break only where a checkpoint is due (#25420)"]
    assert commits[1].pr == 25420 and commits[0].pr is None
    assert [bc.rules_of_commit(repo, c.sha) for c in commits] == ["G1", "G2a"]
    with pytest.raises(Exception, match="same commit"):
        bc.commits_between(repo, "v1", "v1")


def test_the_rules_narrow_the_commits_to_build_to_both_sides_of_each_change():
    from replayer.core.bisect_commits import narrowed

    assert narrowed(["G1"] * 5 + ["G2a"] * 5) == [0, 4, 5, 9]
    assert narrowed(["G1", "G1", "G2a", "G2b", "G2b"]) == [0, 1, 2, 3, 4]
    assert narrowed(["G2a"] * 4) == [0, 1, 2, 3]  # same rules at both ends: every commit, as git bisect
    assert narrowed(["G1", None, "G2a"]) == [0, 1, 2]


def test_a_relative_ref_of_a_repository_here_means_what_it_means_there(repo):
    first = git(repo, "rev-parse", "HEAD~1").strip()
    assert source.resolve_ref(str(repo), "HEAD~1")[1] == first
    assert source.resolve_ref(str(repo), "master^")[1] == first
