"""Per-plan kernel metrics from an ``ncu --csv --page details`` report of ``scripts/wide_b_probe.py --once``.

    PYTHONPATH=. python3 scripts/ncu_plan_summary.py DETAILS.csv.xz ONCE.jsonl [--out SUMMARY.json]

The probe runs each plan once under ``ncu -k regex:moe_w4a16_frag_kernel``: two profiled launches per plan (w13, then
w2), in the order of the ``"ran"`` lines of ONCE.jsonl. Each kernel's row keeps the numbers
:func:`sm120lab.bench.ncu.read_details` reads (duration in us from each row's own unit, DRAM and SM throughput,
occupancy, registers) plus L1/TEX and L2 throughput (% of peak), and the bound ``sm120lab.bench.ncu.bound`` gives.
The plan's total is the sum of its two kernels (ncu flushes caches before each kernel and runs them one at a time:
compare plans with each other, not with CUDA-graph times). Prints a Markdown table; writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import lzma
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sm120lab.atomic_io import write_json_atomic  # noqa: E402
from sm120lab.bench import ncu  # noqa: E402

EXTRA = {"L1/TEX Cache Throughput": "l1tex_pct", "L2 Cache Throughput": "l2_pct"}


def extra_metrics(path: Path) -> dict[int, dict]:
    """``{kernel id: {"l1tex_pct", "l2_pct"}}`` from the SpeedOfLight section of the same report."""
    lines = lzma.open(path, "rt").read().splitlines() if path.suffix == ".xz" else path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    out: dict[int, dict] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if r["Section Name"] == "GPU Speed Of Light Throughput" and r["Metric Name"] in EXTRA:
            out.setdefault(int(r["ID"]), {})[EXTRA[r["Metric Name"]]] = float(r["Metric Value"].replace(",", ""))
    return out


def summarize(details: Path, once: Path) -> list[dict]:
    """One row per plan: its w13 and w2 kernels' metrics and their summed duration."""
    ran = [json.loads(x) for x in once.read_text().splitlines()[1:] if x.strip()]
    ran = [r for r in ran if r.get("ran")]
    kernels = ncu.read_details(details)
    if len(kernels) != 2 * len(ran):
        raise ValueError(f"{details}: {len(kernels)} profiled kernels, expected 2 per plan for {len(ran)} plans")
    extra = extra_metrics(details)
    keep = ("duration_us", "dram_pct", "sm_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct", "registers",
            "warp_cycles_per_issue")
    rows = []
    for i, r in enumerate(ran):
        pair = kernels[2 * i: 2 * i + 2]
        ks = {g: {**{f: k.get(f) for f in keep}, **extra.get(k["id"], {}), "grid": k["grid"], "bound": ncu.bound(k)}
              for g, k in zip(("w13", "w2"), pair)}
        rows.append({"preset": r["preset"], "T": r["T"], "plan": r["plan"], **ks,
                     "total_us": sum(k["duration_us"] for k in ks.values())})
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| preset | plan | w13 us (DRAM / L1 % , occ %) | w2 us (DRAM / L1 %, occ %) | sum us |\n"
            "|---|---|---|---|---|")
    fmt = lambda k: (f"{k['duration_us']:.0f} ({k['dram_pct']:.0f} / {k['l1tex_pct']:.0f}, "  # noqa: E731
                     f"{k['achieved_occupancy_pct']:.0f})")
    return "\n".join([head] + [f"| {r['preset']} | {r['plan']} | {fmt(r['w13'])} | {fmt(r['w2'])} | "
                               f"{r['total_us']:.0f} |" for r in rows])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("details", type=Path)
    p.add_argument("once", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    try:
        rows = summarize(args.details, args.once)
    except (OSError, ValueError, StopIteration) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown(rows))
    if args.out:
        write_json_atomic(args.out, {"details": args.details.name, "once": args.once.name, "rows": rows}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
