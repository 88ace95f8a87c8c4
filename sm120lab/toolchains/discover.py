"""Find every CUDA toolkit on this machine and every one sm120lab installed.

Searched, in order: ``nvcc`` on PATH, ``$CUDA_HOME``/``$CUDA_PATH``/``$CONDA_PREFIX``,
``/usr/local/cuda*`` and ``/opt/cuda*`` (a toolkit with nvcc, ptxas and the nvcc front-end
pieces ``cudafe++``/``cicc`` is used through ``nvcc -ptx``), then the sm120lab toolchain cache
(``sm120lab.toolchains.cache``): 12.x wheel folders are used through NVRTC + ptxas (the 12.x
PyPI ``nvcc`` has no front end), 13.x ones through their full ``nvcc``. Two toolkits with the same
``major.minor`` are reported once, the first found winning (system before cache).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from .cache import MARKER, toolchains_root
from .pins import SASS_TOOLS
from .toolkit import Toolkit, toolkit_name


def tool_version(exe: str) -> str | None:
    """``V<major.minor.patch>`` from ``exe --version`` (nvcc, ptxas), or None if it does not run."""
    try:
        text = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"V(\d+\.\d+\.\d+)", text)
    return m.group(1) if m else None


def nvcc_candidates() -> list[Path]:
    """Every nvcc file on PATH, under CUDA_HOME/CUDA_PATH/CONDA_PREFIX, /usr/local/cuda*, /opt/cuda*."""
    cands: list[str] = []
    which = shutil.which("nvcc")
    if which:
        cands.append(which)
    for var in ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "bin", "nvcc"))
    cands += sorted(glob.glob("/usr/local/cuda*/bin/nvcc")) + sorted(glob.glob("/opt/cuda*/bin/nvcc"))
    return [Path(c) for c in cands if os.path.isfile(c)]


def resolve_nvcc(nvcc: Path) -> Path:
    """The real nvcc behind symlinks and one-line wrapper scripts (``exec /path/to/nvcc "$@"``)."""
    real = Path(os.path.realpath(nvcc))
    try:
        if real.stat().st_size < 4096:
            head = real.read_bytes()
            if head.startswith(b"#!"):
                m = re.search(rb"(/\S+/nvcc)\b", head)
                if m and os.path.isfile(m.group(1).decode()):
                    return Path(os.path.realpath(m.group(1).decode()))
    except OSError:
        pass
    return real


def _nvcc_toolkit(nvcc: Path, origin_kind: str) -> Toolkit | None:
    real = resolve_nvcc(nvcc)
    bin_dir = real.parent if (real.parent / "ptxas").is_file() else None
    nvcc = real
    version = tool_version(str(nvcc))
    if version is None:
        return None
    ptxas = None
    if bin_dir is not None and (bin_dir / "ptxas").is_file():
        ptxas = bin_dir / "ptxas"
    else:  # wrapper: find the ptxas of the same version next to a real nvcc
        for cand in glob.glob("/usr/local/cuda*/bin/ptxas"):
            if tool_version(cand) == version:
                ptxas, bin_dir = Path(cand), Path(cand).parent
                break
    if ptxas is None or bin_dir is None:
        return None
    root = bin_dir.parent
    includes = [p for p in (root / "include", root / "targets" / "x86_64-linux" / "include") if p.is_dir()]
    return Toolkit(name=toolkit_name(version), version=version, frontend="nvcc", origin=f"{origin_kind}:{root}",
                   ptxas=str(ptxas), nvcc=str(nvcc), include_dirs=tuple(map(str, includes)))


def _cache_toolkit(folder: Path) -> Toolkit | None:
    nvidia_dir = folder / "nvidia"
    cu13 = nvidia_dir / "cu13"
    if (cu13 / "bin" / "nvcc").is_file():
        nvcc = cu13 / "bin" / "nvcc"
        version = tool_version(str(nvcc))
        if version is None:
            return None
        return Toolkit(name=toolkit_name(version), version=version, frontend="nvcc",
                       origin=f"sm120lab-cache:{folder}", ptxas=str(cu13 / "bin" / "ptxas"),
                       nvcc=str(nvcc), include_dirs=(str(cu13 / "include"),))
    ptxas = nvidia_dir / "cuda_nvcc" / "bin" / "ptxas"
    libs = sorted((nvidia_dir / "cuda_nvrtc" / "lib").glob("libnvrtc.so.*"))
    if not ptxas.is_file() or not libs:
        return None
    version = tool_version(str(ptxas))
    if version is None:
        return None
    includes = [nvidia_dir / "cuda_runtime" / "include", nvidia_dir / "cuda_cccl" / "include", nvidia_dir / "cuda_nvcc" / "include"]
    return Toolkit(name=toolkit_name(version), version=version, frontend="nvrtc",
                   origin=f"sm120lab-cache:{folder}", ptxas=str(ptxas), nvrtc_lib=str(libs[0]),
                   include_dirs=tuple(str(p) for p in includes if p.is_dir()))


def installed_folders() -> list[Path]:
    root = toolchains_root()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / MARKER).is_file() and p.name != SASS_TOOLS)


@cache
def _discover_cached(key: tuple) -> tuple[Toolkit, ...]:
    """Every toolkit found, in search order (system first), duplicates of a version included."""
    found: list[Toolkit] = []
    seen_real: set[str] = set()
    for nvcc in nvcc_candidates():
        real = str(resolve_nvcc(nvcc))
        if real in seen_real:
            continue
        seen_real.add(real)
        tk = _nvcc_toolkit(nvcc, "system")
        if tk is not None:
            found.append(tk)
    for folder in installed_folders():
        tk = _cache_toolkit(folder)
        if tk is not None:
            found.append(tk)
    return tuple(found)


def discover_all(refresh: bool = False) -> list[Toolkit]:
    """Every toolkit found, including ones shadowed by an earlier toolkit of the same version."""
    key = (os.environ.get("PATH"), os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
           os.environ.get("CONDA_PREFIX"), str(toolchains_root()),
           tuple(str(p) for p in installed_folders()))
    if refresh:
        _discover_cached.cache_clear()
    return list(_discover_cached(key))


def discover(refresh: bool = False) -> list[Toolkit]:
    """All usable toolkits, one per ``major.minor`` (the first found wins), oldest first."""
    chosen: dict[str, Toolkit] = {}
    for tk in discover_all(refresh):
        chosen.setdefault(tk.name, tk)
    return sorted(chosen.values(), key=lambda t: t.major_minor)


def get_toolkit(name: str) -> Toolkit:
    """The discovered toolkit called ``name`` ("12.9"); ValueError listing the available ones."""
    for tk in discover():
        if tk.name == name:
            return tk
    have = ", ".join(t.name for t in discover()) or "none"
    raise ValueError(f"--toolkit {name!r}: no such CUDA toolkit found (available: {have}; "
                     f"install with `sm120lab toolchains install {name}`)")


def find_sass_tool(install_if_missing: bool = False) -> str | None:
    """Path of a ``cuobjdump`` (13.2+ reads every cubin here), from the cache, PATH or a toolkit.

    The local /usr/local/cuda-13.0 has none; with ``install_if_missing`` the small PyPI
    ``sass-tools`` wheels are installed into the cache first.
    """
    cached = toolchains_root() / SASS_TOOLS / "nvidia" / "cu13" / "bin" / "cuobjdump"
    if cached.is_file() and (toolchains_root() / SASS_TOOLS / MARKER).is_file():
        return str(cached)
    which = shutil.which("cuobjdump")
    if which:
        return which
    for cand in glob.glob("/usr/local/cuda*/bin/cuobjdump"):
        return cand
    if install_if_missing:
        from .install import install
        install(SASS_TOOLS, log=lambda s: None)
        if cached.is_file():
            return str(cached)
    return None
