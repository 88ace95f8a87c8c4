"""Recorded measurements: ``data/cutlass_smem/<flashinfer-version>[-patched].json``.

Each file is the dict from :func:`.build.measure` plus ``envinfo`` (``sm120lab.envinfo.collect()``)
and ``command`` (how it was produced), written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..atomic_io import _json_default, write_text_atomic

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "cutlass_smem"


def result_path(version: str, patched: bool = False, data_dir: Path | None = None) -> Path:
    return Path(data_dir or DATA_DIR) / f"{version}{'-patched' if patched else ''}.json"


def load(version: str, patched: bool = False, data_dir: Path | None = None) -> dict:
    """The recorded result for ``version`` (raises FileNotFoundError naming the file)."""
    path = result_path(version, patched, data_dir)
    if not path.is_file():
        raise FileNotFoundError(f"no recorded measurement {path}; run: sm120lab cutlass-smem --flashinfer "
                                f"{version}{' --patched' if patched else ''}")
    return json.loads(path.read_text())


def recorded(data_dir: Path | None = None) -> list[dict]:
    """Every recorded result in ``data_dir`` (sorted by version, unpatched first)."""
    out = [json.loads(p.read_text()) for p in sorted(Path(data_dir or DATA_DIR).glob("*.json"))
           if p.name[0].isdigit()]
    from packaging.version import Version
    return sorted(out, key=lambda d: (Version(d["flashinfer_version"]), d["patched"]))


def measure_cached(version: str, patched: bool = False, *, force: bool = False, data_dir: Path | None = None,
                   command: str | None = None, **kwargs) -> dict:
    """Recorded result if present (and not ``force``), else compile, record and return it."""
    path = result_path(version, patched, data_dir)
    if path.is_file() and not force:
        return json.loads(path.read_text())
    from ..cmdline import command_line
    from ..envinfo import collect
    from .build import measure

    result = measure(version, patched=patched, **kwargs)
    result["envinfo"] = collect()
    result["command"] = command or command_line()
    write_text_atomic(path, json.dumps(result, indent=1, default=_json_default) + "\n", mode=0o644)
    return result


def recorded_overflow(compile_cutlass: bool = False, *, jobs: int = 2, versions=("0.6.5", "0.7.4"),
                      data_dir: Path | None = None) -> tuple[dict[str, list[dict]], dict[str, int], dict[str, int]]:
    """Which FlashInfer SM120 grouped-GEMM kernel types overflow, from the recorded shared-storage sizes.

    A kernel type is over when ``align_1024(stages x stage bytes + epilogue + other) > 101,376 B``
    (:func:`.analysis.overflow_summary` of :func:`recorded`).

    Args:
        compile_cutlass: compile FlashInfer's generated sources first (:func:`measure_cached`, ~3 min per
            file; a recorded result is reused) instead of only reading the recording.
        jobs: parallel compile jobs when compiling.
        versions: the FlashInfer versions to compile.
        data_dir: where the results are recorded (default ``data/cutlass_smem/``).

    Returns:
        ``(over, kinds, over_after)`` per FlashInfer version: the unpatched kernel configs over the
        limit, the number of kernel types, and how many stay over with the stage-count patch
        (all empty when nothing is recorded).
    """
    from .analysis import overflow_summary

    if compile_cutlass:
        for version in versions:
            measure_cached(version, jobs=jobs, data_dir=data_dir)
    return overflow_summary(recorded(data_dir))
