"""Before/after table of the stage-count patch: ``data/cutlass_smem/before_after_<version>.{csv,md}``."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..atomic_io import write_text_atomic
from .analysis import SM120_SMEM_LIMIT, before_after
from .store import DATA_DIR, load

COLUMNS = ("act", "tile", "epilogue", "swap_ab", "out", "stages_before", "smem_before", "stages_after",
           "smem_after", "limit", "fits_before", "fits_after")


def write_before_after(version: str, data_dir: Path | None = None) -> tuple[Path, Path]:
    """Join the recorded unpatched and patched results of ``version``; write CSV and Markdown."""
    rows = before_after(load(version, False, data_dir), load(version, True, data_dir))
    out_dir = Path(data_dir or DATA_DIR)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    csv_path = write_text_atomic(out_dir / f"before_after_{version}.csv", buf.getvalue(), mode=0o644)
    n_over_before = sum(not r["fits_before"] for r in rows)
    n_over_after = sum(not r["fits_after"] for r in rows)
    lines = [f"# FlashInfer {version}: SM120 grouped GEMM shared storage before/after the stage-count patch",
             "",
             f"From data/cutlass_smem/{version}.json and {version}-patched.json (compiled FlashInfer sources, host-side "
             f"sizeof). Limit {SM120_SMEM_LIMIT:,} B. Over the limit: {n_over_before} of {len(rows)} before, "
             f"{n_over_after} after. Runtime effect on SM120 hardware: unverified.",
             "",
             "| act | tile | epilogue | swap_ab | out | stages before | bytes before | stages after | bytes after | fits after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r["fits_before"] else " **over**"
        lines.append(f"| {r['act']} | {r['tile']} | {r['epilogue']} | {r['swap_ab']} | {r['out']} | {r['stages_before']} | "
                     f"{r['smem_before']:,}{mark} | {r['stages_after']} | {r['smem_after']:,} | {'yes' if r['fits_after'] else 'NO'} |")
    md_path = write_text_atomic(out_dir / f"before_after_{version}.md", "\n".join(lines) + "\n", mode=0o644)
    return csv_path, md_path
