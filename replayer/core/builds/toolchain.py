"""What a backend needs to compile vs what this machine has, checked before a compile starts.

A Vulkan build on Debian 12 used to compile for two minutes and then fail inside gmake:
b10001's ``ggml-vulkan.cpp`` uses ``vk::LayerSettingEXT`` (VK_EXT_layer_settings), which the
distribution's 1.3.239 headers lack. Every check here is a file or a program the backend's
CMake asks for (``ggml/src/ggml-<backend>/CMakeLists.txt``: ``find_package(Vulkan
COMPONENTS glslc)``, ``find_package(SPIRV-Headers)``, ``find_package(CUDAToolkit)`` with the
cuBLAS it links, HIP),
plus, once the sources are extracted, the Vulkan-Hpp types the build's own code uses. The
result is one line: what is missing and how to get it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from replayer.core.errors import BuildError

#: where compilers look for headers when no SDK variable points elsewhere
INCLUDE_DIRS = [Path("/usr/include"), Path("/usr/local/include")]


@dataclass
class Check:
    """The outcome for one backend: ``missing`` items with a fix each; ``found`` for display."""

    backend: str
    missing: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    apt: list[str] = field(default_factory=list)  # Debian/Ubuntu packages that provide what is missing
    found: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.missing

    def line(self) -> str:
        if self.ok:
            return f"{self.backend}: toolchain ready ({', '.join(self.found) or 'nothing extra needed'})"
        fixes = list(dict.fromkeys(self.fixes))
        if self.apt:
            fixes.insert(0, "apt install " + " ".join(dict.fromkeys(self.apt)))
        return f"{self.backend} build needs {', '.join(self.missing)} — {' or '.join(fixes)}"

    def need(self, what: str, fix: str = "", apt: str | None = None) -> None:
        self.missing.append(what)
        if fix:
            self.fixes.append(fix)
        if apt:
            self.apt.append(apt)


def _include_dirs(env_vars: tuple[str, ...]) -> list[Path]:
    dirs = []
    for var in env_vars:
        root = os.environ.get(var)
        if root:
            dirs.append(Path(root) / "include")
    return dirs + INCLUDE_DIRS


def _find_header(rel: str, env_vars: tuple[str, ...] = ()) -> Path | None:
    for d in _include_dirs(env_vars):
        if (d / rel).is_file():
            return d / rel
    return None


def vulkan_header_version(header: Path) -> str | None:
    """``1.3.239`` from ``vulkan_core.h``'s VK_HEADER_VERSION_COMPLETE / VK_HEADER_VERSION."""
    try:
        text = header.read_text(errors="replace")
    except OSError:
        return None
    patch = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", text)
    full = re.search(r"#define\s+VK_HEADER_VERSION_COMPLETE\s+VK_MAKE_API_VERSION\(\s*\d+\s*,\s*(\d+)\s*,\s*(\d+)", text)
    if not patch:
        return None
    return f"{full.group(1)}.{full.group(2)}.{patch.group(1)}" if full else f"1.x.{patch.group(1)}"


def _hpp_has(type_name: str, vulkan_dir: Path) -> bool:
    """Whether Vulkan-Hpp (``vulkan.hpp`` or its split ``vulkan_structs.hpp``) declares the type."""
    pat = re.compile(rf"\b(struct|class|using)\s+{re.escape(type_name)}\b")
    for name in ("vulkan_structs.hpp", "vulkan.hpp"):
        f = vulkan_dir / name
        try:
            if f.is_file() and pat.search(f.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def vulkan_types_used(src: Path) -> list[str]:
    """Vulkan-Hpp types the build's ggml-vulkan.cpp uses that older headers lack."""
    f = src / "ggml" / "src" / "ggml-vulkan" / "ggml-vulkan.cpp"
    try:
        text = f.read_text(errors="replace")
    except OSError:
        return []
    return [t for t in ("LayerSettingEXT",) if re.search(rf"\bvk::{t}\b", text)]


def _runs(cmd: list[str]) -> str | None:
    """First line of ``cmd``'s output, or None when it is absent or fails."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return None
    out = (p.stdout or p.stderr).strip().splitlines()
    return out[-1] if out else ""


def _check_common(c: Check) -> None:
    if shutil.which("cmake") is None:
        c.need("cmake", apt="cmake")
    if shutil.which("c++") is None and shutil.which("g++") is None and shutil.which("clang++") is None:
        c.need("a C++ compiler", apt="build-essential")


def _check_vulkan(c: Check, src: Path | None) -> None:
    sdk = ("VULKAN_SDK",)
    core = _find_header("vulkan/vulkan_core.h", sdk)
    hpp = _find_header("vulkan/vulkan.hpp", sdk)
    sdk_fix = "the LunarG Vulkan SDK (set VULKAN_SDK)"
    if core is None or hpp is None:
        c.need("Vulkan headers (vulkan/vulkan.hpp)", sdk_fix, apt="libvulkan-dev")
    else:
        version = vulkan_header_version(core) or "unknown version"
        c.found.append(f"Vulkan headers {version}")
        if src is not None:
            for t in vulkan_types_used(src):
                if not _hpp_has(t, hpp.parent):
                    c.need(f"vk::{t} (Vulkan headers {version} lack it; this build's ggml-vulkan.cpp uses it)",
                           "newer Vulkan headers: " + sdk_fix + ", or libvulkan-dev of a newer release "
                           "(Debian 13, Ubuntu 24.04)")
    if _find_header("spirv/unified1/spirv.hpp", sdk) is None:
        c.need("SPIRV-Headers", sdk_fix, apt="spirv-headers")
    glslc = _runs(["glslc", "--version"])
    if glslc is None:
        c.need("glslc (shader compiler)", sdk_fix, apt="glslc")
    else:
        c.found.append("glslc")


#: where a CUDA toolkit lives when neither CUDA_PATH nor CUDA_HOME says
CUDA_ROOTS = [Path("/usr/local/cuda")]
#: where a distribution's CUDA packages put their libraries
LIB_DIRS = [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib")]


def _cuda_roots() -> list[Path]:
    return [Path(os.environ[v]) for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)] + CUDA_ROOTS


def _find_cuda_header(name: str) -> Path | None:
    return next((d / "include" / name for d in _cuda_roots() if (d / "include" / name).is_file()), None) \
        or _find_header(name)


def _find_cuda_lib(stem: str) -> Path | None:
    """``lib<stem>.so*`` in the toolkit's library folders (what CMake's CUDAToolkit searches)."""
    dirs = [d / sub for d in _cuda_roots() for sub in ("lib64", "lib")]
    dirs += [t / "lib" for d in _cuda_roots() if (d / "targets").is_dir() for t in sorted((d / "targets").iterdir())]
    for d in dirs + LIB_DIRS:
        hit = next(iter(sorted(d.glob(f"lib{stem}.so*"))), None) if d.is_dir() else None
        if hit is not None:
            return hit
    return None


def _check_cuda(c: Check) -> None:
    """nvcc, the runtime headers and cuBLAS: ggml-cuda links ``CUDA::cudart CUDA::cublas``
    (``ggml/src/ggml-cuda/CMakeLists.txt``); a toolkit without cuBLAS fails at CMake's generate step."""
    toolkit = "NVIDIA's CUDA toolkit with nvcc on PATH (or set CUDA_PATH)"
    nvcc = _runs(["nvcc", "--version"])
    if nvcc is None:
        c.need("nvcc (CUDA toolkit)", toolkit, apt="nvidia-cuda-toolkit")
    else:
        c.found.append(nvcc.strip())
    if _find_cuda_header("cuda_runtime.h") is None:
        c.need("CUDA headers (cuda_runtime.h)", toolkit, apt="nvidia-cuda-toolkit")
    if _find_cuda_header("cublas_v2.h") is None or _find_cuda_lib("cublas") is None:
        release = re.search(r"cuda_(\d+)\.(\d+)", nvcc or "")
        if release:  # NVIDIA's own toolkit: its cuBLAS package, not the distribution's older toolkit
            major, minor = release.groups()
            c.need(f"cuBLAS for CUDA {major}.{minor} (cublas_v2.h, libcublas)",
                   f"apt install libcublas-dev-{major}-{minor} (NVIDIA's CUDA repository) or the full CUDA "
                   "toolkit installer")
        else:
            c.need("cuBLAS (cublas_v2.h, libcublas)", toolkit, apt="nvidia-cuda-toolkit")
    else:
        c.found.append("cuBLAS")


def _check_rocm(c: Check) -> None:
    rocm = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    if shutil.which("hipcc") is None and not (rocm / "bin" / "hipcc").exists():
        c.need("hipcc (ROCm)", "ROCm from AMD (amdgpu-install --usecase=hip,rocm; or set ROCM_PATH)")
    else:
        c.found.append(f"ROCm at {rocm}")


def check(backend: str, src: Path | None = None) -> Check:
    """Compare what ``backend`` needs with this machine; ``src`` adds the build's own needs."""
    c = Check(backend)
    _check_common(c)
    if backend == "vulkan":
        _check_vulkan(c, src)
    elif backend == "cuda":
        _check_cuda(c)
    elif backend == "rocm":
        _check_rocm(c)
    elif backend == "metal" and sys.platform != "darwin":
        c.need("macOS", "Metal builds only on a Mac")
    elif backend == "sycl" and shutil.which("icpx") is None:
        c.need("icpx (Intel oneAPI)", "the Intel oneAPI Base Toolkit (source its setvars.sh)")
    return c


def require(backend: str, src: Path | None = None, build: int | None = None) -> Check:
    """``check`` that raises one clear line when something is missing (before any compile)."""
    c = check(backend, src)
    if not c.ok:
        who = f"b{build} " if build is not None else ""
        raise BuildError(f"cannot compile {who}{c.line()}")
    return c
