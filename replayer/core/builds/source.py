"""The source of a build that is not (only) a release: a working tree, a git ref, patches.

``builds install --source DIR``, ``--git URL --ref REF`` and ``--patch FILE`` (over a release's
sdist, a tree or a ref) all come here to put one llama.cpp source tree into the build's work
folder and to say what it is. A build's identity is its source — the release number, or the
commit plus a hash of the local changes, plus the hash of every applied patch in order — so
the same source is never compiled twice, and two different ones never share an entry.

The tree is copied (never built in place: the user's checkout is left exactly as it was) to
``work/…/src/llama.cpp``, the same relative path a release build uses, so ccache reuses the
objects of every file the two have in common. A git ref is fetched into a cached clone under
the build cache (``git/<hash of the URL>``), then exported with ``git archive``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from replayer.core import paths
from replayer.core.errors import BuildError

#: what marks a llama.cpp tree (and a server this tool knows how to build)
MARKERS = ("CMakeLists.txt", "tools/server/server-context.cpp", "include/llama.h")
MAX_TREE_BYTES = 2 * 1024**3  # a llama.cpp checkout is ~100 MB without its build folders
MAX_PATCH_BYTES = 32 * 1024**2
_SKIP_DIRS = {".git", "build", "node_modules", "__pycache__", ".cache"}
_GIT_TIMEOUT = 600


class SourceError(BuildError):
    """The source asked for is not buildable as given (not llama.cpp, no such ref, a patch that
    does not apply): the user's input, said in one line, with nothing left in the cache."""


@dataclass(frozen=True)
class SourceSpec:
    """What the user asked to build: exactly one of ``release``, ``tree`` or ``url`` (+ ``ref``)."""

    release: int | None = None
    tree: Path | None = None
    url: str | None = None
    ref: str | None = None
    patches: tuple[Path, ...] = ()
    commit: str | None = None  # ``ref`` resolved by ``check`` (so the tree is fetched once)

    def describe(self) -> str:
        base = (f"b{self.release}" if self.release is not None else str(self.tree) if self.tree
                else f"{self.url}@{self.ref}")
        return base + "".join(f" + {p.name}" for p in self.patches)


def spec_from(*, tree: str | None = None, url: str | None = None, ref: str | None = None,
              release: list[str] | None = None, patches: list[str] | None = None) -> SourceSpec:
    """The ``SourceSpec`` of what the user typed (the CLI's options, the builds screen's fields),
    or one line saying what is missing or does not go together."""
    from replayer.core.builds.catalog import parse_build

    release = [r for r in release or [] if r.strip()]
    pats = tuple(Path(p).expanduser() for p in patches or () if p.strip())
    if tree and url:
        raise SourceError("give a llama.cpp folder or a git URL, not both")
    if (tree or url) and release:
        raise SourceError("a build number goes with a patch only, not with a source folder or a git URL")
    if url and not ref:
        raise SourceError("a git URL needs a ref (a branch, tag, commit or pull/N/head)")
    if tree:
        return SourceSpec(tree=Path(tree).expanduser(), patches=pats)
    if url:
        return SourceSpec(url=url, ref=ref, patches=pats)
    if not pats:
        raise SourceError("a source build needs a llama.cpp folder, a git URL and ref, or a build number and a patch")
    if len(release) != 1:
        raise SourceError("a patch applies over one release: give exactly one build number")
    b = parse_build(release[0])
    if b.number is None:
        raise SourceError(f"a patch needs a build number, not a generation ({release[0]})")
    return SourceSpec(release=b.number, patches=pats)


def looks_like_url(text: str) -> bool:
    """A git remote rather than a folder: ``scheme://…``, ``user@host:path``, or a ``.git`` that is no folder here."""
    return "://" in text or bool(re.match(r"^[\w.-]+@[\w.-]+:", text)) or (
        text.endswith(".git") and not Path(text).expanduser().is_dir())


@dataclass
class Materialized:
    """The tree in the work folder and what it is."""

    tree: Path
    identity: str  # a stable hash of the whole source
    build_number: int  # LLAMA_BUILD_NUMBER: the release's, or git's commit count
    label: str  # what ``builds list`` and the panes show
    origin: dict = field(default_factory=dict)


def _git(args: list[str], cwd: Path | None = None, what: str = "git") -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_GIT_TIMEOUT,
                              stdin=subprocess.DEVNULL, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except FileNotFoundError as exc:
        raise BuildError("git is not installed; it is needed to build from a git ref or a working tree") from exc
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what} did not finish within {_GIT_TIMEOUT} s") from exc
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        exc = BuildError(f"{what}: {err[:200]}")
        exc.stderr = proc.stderr  # type: ignore[attr-defined]
        raise exc
    return proc.stdout


def check_tree(tree: Path) -> Path:
    """``tree`` as a llama.cpp source tree, or a one-line error saying what is missing."""
    tree = tree.expanduser()
    if not tree.is_dir():
        raise SourceError(f"{tree} is not a folder")
    missing = [m for m in MARKERS if not (tree / m).is_file()]
    if missing:
        raise SourceError(f"{tree} is not a llama.cpp source tree (no {missing[0]})")
    return tree.resolve()


def _is_git_root(tree: Path) -> bool:
    try:
        return Path(_git(["rev-parse", "--show-toplevel"], tree).strip()).resolve() == tree
    except BuildError:
        return False


def _tree_files(tree: Path, is_git: bool) -> list[str]:
    """The tree's files, relative: git's tracked and untracked-not-ignored ones, else every file
    outside build and VCS folders."""
    if is_git:
        out = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], tree, "git ls-files")
        return sorted({f for f in out.split("\0") if f and (tree / f).is_file() and not (tree / f).is_symlink()})
    files = []
    for root, dirs, names in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("build"))
        rel = Path(root).relative_to(tree)
        files += [str(rel / n) for n in sorted(names) if not (Path(root) / n).is_symlink()]
    return files


def _copy_tree(tree: Path, dest: Path, is_git: bool) -> str:
    """Copy the tree's files to ``dest``; returns the hash of their paths and contents."""
    h = hashlib.sha256()
    total = 0
    for rel in _tree_files(tree, is_git):
        src = tree / rel
        total += src.stat().st_size
        if total > MAX_TREE_BYTES:
            raise SourceError(f"{tree} holds over {MAX_TREE_BYTES >> 30} GB of sources; is it a llama.cpp tree?")
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes()  # read once: copied and hashed from the same bytes
        out.write_bytes(data)
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def _commit_count(repo: Path, commit: str) -> int:
    return int(_git(["rev-list", "--count", commit], repo, "git rev-list").strip() or 0)


def _from_tree(spec: SourceSpec, dest: Path) -> Materialized:
    tree = check_tree(spec.tree)  # type: ignore[arg-type]
    is_git = _is_git_root(tree)
    content = _copy_tree(tree, dest, is_git)
    if is_git:
        commit = _git(["rev-parse", "HEAD"], tree, "git rev-parse").strip()
        dirty = bool(_git(["status", "--porcelain", "--untracked-files=normal"], tree, "git status").strip())
        ident = f"{commit}:{content}" if dirty else commit
        label = f"{commit[:9]}{'+local' if dirty else ''}"
        return Materialized(dest, ident, _commit_count(tree, commit), label,
                            {"kind": "tree", "path": str(tree), "commit": commit, "local_changes": dirty})
    return Materialized(dest, f"tree:{content}", 0, f"tree-{content[:9]}", {"kind": "tree", "path": str(tree)})


def _clone_dir(url: str) -> Path:
    return paths.builds_dir() / "git" / hashlib.sha256(url.encode()).hexdigest()[:16]


def _commit_in(repo: Path, ref: str) -> str | None:
    for want in (ref, f"refs/tags/{ref}", f"refs/remotes/origin/{ref}"):
        try:
            return _git(["rev-parse", "--verify", "-q", f"{want}^{{commit}}"], repo).strip()
        except BuildError:
            pass
    return None


def resolve_ref(url: str, ref: str) -> tuple[Path, str]:
    """The cached clone of ``url`` and the commit ``ref`` names in it (fetched when needed).

    For a repository on this machine the ref is resolved in it first, so ``HEAD~1`` and a
    local branch mean what they mean there; the commit is then fetched into the cache."""
    if not re.fullmatch(r"[A-Za-z0-9._/+~^-]{1,200}", ref) or ref.startswith("-") or ".." in ref:
        raise SourceError(f"{ref!r} is not a git ref")
    repo = _clone_dir(url)
    if not (repo / "HEAD").is_file():
        repo.mkdir(parents=True, exist_ok=True)
        _git(["init", "--bare", "-q", str(repo)], what="git init")
    local = Path(url).expanduser()
    if local.is_dir():
        sha = _commit_in(local, ref)
        if sha is None:
            raise SourceError(f"no ref {ref!r} in {url}")
        if _commit_in(repo, sha) is None:
            _git(["fetch", "-q", "--tags", str(local), "+refs/heads/*:refs/remotes/origin/*"], repo,
                 f"git fetch {url}")
        if _commit_in(repo, sha) is None:
            _git(["fetch", "-q", str(local), sha], repo, f"git fetch {sha[:9]}")
        return repo, sha
    if re.fullmatch(r"[0-9a-f]{40}", ref) and (sha := _commit_in(repo, ref)) is not None:
        return repo, sha  # a commit never moves; a branch may have: fetched again
    _git(["fetch", "-q", "--tags", url, "+refs/heads/*:refs/remotes/origin/*"], repo, f"git fetch {url}")
    if ref.startswith("pull/"):
        _git(["fetch", "-q", url, f"+refs/{ref}:refs/remotes/origin/{ref}"], repo, f"git fetch {ref}")
    if (sha := _commit_in(repo, ref)) is not None:
        return repo, sha
    raise SourceError(f"no ref {ref!r} in {url}")


def _from_git(spec: SourceSpec, dest: Path) -> Materialized:
    if spec.commit:  # resolved by check()
        repo, commit = _clone_dir(spec.url), spec.commit  # type: ignore[arg-type]
    else:
        repo, commit = resolve_ref(spec.url, spec.ref)  # type: ignore[arg-type]
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest.parent / "src.tar"
    _git(["archive", "--format=tar", "-o", str(archive), commit], repo, "git archive")
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
    archive.unlink()
    check_tree(dest)
    subject = _git(["log", "-1", "--format=%s", commit], repo, "git log").strip()
    return Materialized(dest, commit, _commit_count(repo, commit), commit[:9],
                        {"kind": "git", "url": spec.url, "ref": spec.ref, "commit": commit, "subject": subject})


def apply_patches(tree: Path, patches: tuple[Path, ...]) -> list[dict]:
    """Apply each diff in order with ``git apply``; one that does not apply names its file and hunk."""
    done = []
    for patch in patches:
        patch = patch.expanduser()
        if not patch.is_file():
            raise SourceError(f"no such patch file: {patch}")
        data = patch.read_bytes()[:MAX_PATCH_BYTES + 1]
        if len(data) > MAX_PATCH_BYTES:
            raise SourceError(f"{patch.name} is over {MAX_PATCH_BYTES >> 20} MB: not a patch to a source tree")
        try:
            _git(["apply", "--check", "-p1", "--whitespace=nowarn", str(patch.resolve())], tree, "check")
        except BuildError as exc:
            # git: "error: patch failed: tools/server/server-context.cpp:3494" / "… does not exist in index"
            where = re.search(r"patch failed: (\S+)", getattr(exc, "stderr", ""))
            raise SourceError(f"patch {patch.name} does not apply: "
                             + (f"hunk at {where.group(1)} does not match" if where else str(exc).split(": ", 1)[-1])
                             ) from None
        _git(["apply", "-p1", "--whitespace=nowarn", str(patch.resolve())], tree, f"git apply {patch.name}")
        done.append({"name": patch.name, "sha256": hashlib.sha256(data).hexdigest()})
    return done


def check(spec: SourceSpec) -> SourceSpec:
    """What can be said wrong before any work (the tree, the ref, the patch files); the spec
    with its ref resolved to the commit it names."""
    for patch in spec.patches:
        if not patch.expanduser().is_file():
            raise SourceError(f"no such patch file: {patch}")
    if spec.tree is not None:
        check_tree(spec.tree)
    elif spec.url is not None:
        return dataclasses.replace(spec, commit=resolve_ref(spec.url, spec.ref or "")[1])
    return spec


def materialize(spec: SourceSpec, src_root: Path, release_tree=None) -> Materialized:
    """The spec's source tree at ``src_root/llama.cpp``, patched, with its identity.

    ``release_tree(number, src_root) -> Path`` extracts a release's sdist there (the build
    manager's own extraction, which names the tree ``llama.cpp`` too)."""
    dest = src_root / "llama.cpp"
    if spec.release is not None:
        tree = release_tree(spec.release, src_root)
        m = Materialized(tree, f"b{spec.release}", spec.release, f"b{spec.release}",
                         {"kind": "release", "release": spec.release})
    elif spec.tree is not None:
        m = _from_tree(spec, dest)
    elif spec.url and spec.ref:
        m = _from_git(spec, dest)
    else:
        raise BuildError("a source build needs a release number, --source DIR, or --git URL with --ref REF")
    if spec.patches:
        applied = apply_patches(m.tree, spec.patches)
        m.origin["patches"] = applied
        m.identity += "".join(f"+{p['sha256']}" for p in applied)
        m.label += "".join(f"+{Path(p['name']).stem}" for p in applied)
    m.identity = hashlib.sha256(m.identity.encode()).hexdigest()[:16]
    return m
