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
