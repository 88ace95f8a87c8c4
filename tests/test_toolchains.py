"""sm120lab.toolchains: pins, discovery of the system nvcc, the PyPI installer (cached), the CLI."""

import os
import random
import shutil
import stat
import subprocess
import sys

import pytest

from sm120lab.toolchains import discover, find_sass_tool, install, is_installed, known_versions, wheels_for
from sm120lab.toolchains.discover import resolve_nvcc

HAVE_NVCC = shutil.which("nvcc") is not None


def test_pins_are_exact_and_one_set_per_version():
    assert known_versions()[:3] == ["12.8", "12.9", "13.0"]
    for v in known_versions():
        wheels = wheels_for(v)
        assert wheels and all("==" in w for w in wheels)
        assert len({w.split("==")[0] for w in wheels}) == len(wheels)
    assert "nvidia-cuda-nvrtc-cu12==12.9.86" in wheels_for("12.9")
    assert "nvidia-cuda-nvcc==13.0.88" in wheels_for("13.0")


def test_unknown_version_is_a_clear_error():
    with pytest.raises(ValueError, match="12.7.*expected one of 12.8, 12.9, 13.0"):
        wheels_for("12.7")


def test_wrapper_script_resolves_to_real_nvcc(tmp_path):
    real_dir = tmp_path / "cuda" / "bin"
    real_dir.mkdir(parents=True)
    real = real_dir / "nvcc"
    real.write_bytes(b"\x7fELF" + random.Random(0).randbytes(8000))  # fixed bytes: CI is deterministic
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    assert resolve_nvcc(wrapper) == real.resolve()
    assert resolve_nvcc(real) == real.resolve()


@pytest.mark.skipif(not HAVE_NVCC, reason="no nvcc on PATH")
def test_discover_finds_the_system_nvcc():
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    tks = {t.name: t for t in discover(refresh=True)}
    system = [t for t in tks.values() if t.origin.startswith("system:")]
    assert system, tks
    t = system[0]
    assert t.frontend == "nvcc" and os.path.isfile(t.ptxas) and f"V{t.version}" in out


@pytest.mark.network
def test_install_sass_tools_is_cached_and_idempotent():
    """Installs the small cuobjdump/nvdisasm wheels into the cache (once), then skips."""
    install("sass-tools", log=lambda s: None)
    assert is_installed("sass-tools")
    msgs = []
    install("sass-tools", log=msgs.append)
    assert msgs and "already installed" in msgs[0]
    tool = find_sass_tool()
    assert tool and "release 13." in subprocess.run([tool, "--version"], capture_output=True, text=True).stdout


def test_cli_list_and_bad_version():
    env = dict(os.environ)
    ok = subprocess.run([sys.executable, "-m", "sm120lab", "toolchains", "--list"], capture_output=True,
                        text=True, env=env, timeout=120)
    assert ok.returncode == 0 and "cache:" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "sm120lab", "toolchains", "install", "11.2"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "11.2" in bad.stderr and "12.8" in bad.stderr
