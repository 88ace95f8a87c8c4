"""Pinned PyPI wheels that make up each CUDA toolkit sm120lab can install.

Sources: the wheels' own PyPI pages (``pip index versions <name>``) and the layouts read from the
installed wheels (``nvidia/cuda_nvcc/bin/ptxas`` for 12.x, ``nvidia/cu13/bin/nvcc`` for 13.x).

- 12.x: ``nvidia-cuda-nvcc-cu12`` carries ``ptxas`` and libnvvm but no working ``nvcc`` driver
  (no cicc/cudafe++/nvlink/fatbinary), so 12.x compiles C++ -> PTX with NVRTC (the
  ``nvidia-cuda-nvrtc-cu12`` shared library, loaded with ctypes) and PTX -> cubin with that
  version's ``ptxas``; ``nvidia-cuda-runtime-cu12`` gives the CUDA headers, ``nvidia-cuda-cccl-cu12``
  the CCCL headers.
- 13.0: the split ``nvidia-cuda-nvcc`` / ``nvidia-nvvm`` / ``nvidia-cuda-crt`` wheels form a full nvcc.
- SASS tools: ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` exist on PyPI from 13.2 on and read
  12.x cubins too; they are installed as the pseudo-toolkit ``sass-tools``.

All wheels of one version go into ONE ``pip install --no-deps --target DIR`` call: a second
``--target`` call into the same directory does not merge the shared ``nvidia/`` package folder.
"""

from __future__ import annotations

from .toolkit import version_key

SASS_TOOLS = "sass-tools"

WHEELS: dict[str, tuple[str, ...]] = {
    "12.8": (
        "nvidia-cuda-nvcc-cu12==12.8.93",
        "nvidia-cuda-nvrtc-cu12==12.8.93",
        "nvidia-cuda-runtime-cu12==12.8.90",
        "nvidia-cuda-cccl-cu12==12.8.90",
    ),
    "12.9": (
        "nvidia-cuda-nvcc-cu12==12.9.86",
        "nvidia-cuda-nvrtc-cu12==12.9.86",
        "nvidia-cuda-runtime-cu12==12.9.79",
        "nvidia-cuda-cccl-cu12==12.9.27",
    ),
    "13.0": (
        "nvidia-cuda-nvcc==13.0.88",
        "nvidia-nvvm==13.0.88",
        "nvidia-cuda-crt==13.0.88",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-cccl==13.0.85",
    ),
    SASS_TOOLS: (
        "nvidia-cuda-cuobjdump==13.2.86",
        "nvidia-cuda-nvdisasm==13.2.86",
    ),
}


def known_versions() -> list[str]:
    """Installable names, toolkits first (sorted numerically), then ``sass-tools``."""
    toolkits = sorted((v for v in WHEELS if v != SASS_TOOLS), key=version_key)
    return toolkits + [SASS_TOOLS]


def wheels_for(version: str) -> tuple[str, ...]:
    """The pinned requirement strings for ``version``; ValueError naming the known ones otherwise."""
    try:
        return WHEELS[version]
    except KeyError:
        raise ValueError(f"toolkit version {version!r} is not installable from PyPI by sm120lab; "
                         f"expected one of {', '.join(known_versions())}") from None
