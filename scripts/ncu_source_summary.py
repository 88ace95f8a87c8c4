"""Where each profiled kernel's warps wait, per SASS instruction, from Nsight Compute's source page.

    python3 scripts/ncu_source_summary.py SOURCE.csv[.xz] [--windows WINDOWS.json] [--top 6] > summary.json

``SOURCE.csv`` is ``ncu -i REPORT --page source --csv --print-source sass`` of a report taken with the source
counters (``--set full``): one block per profiled kernel launch, one row per SASS instruction with its warp stall
samples and executed count. Per launch (in profile order, matched to ``--windows`` when given): total samples,
warp instructions executed, the share of samples per stall reason, and the ``--top`` instructions by samples
with their dominant reasons. For a load-latency wait the instruction that stalls is the first reader of the
loaded register, so each top row also names the nearest earlier load writing a register it reads (``fed_by``).
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import lzma
import re
import sys
from pathlib import Path

_LOAD = re.compile(r"\bLD(?:G|S|C|SM)\b\S*\s+(R\d+)")


def _num(v: str | None) -> float:
    return float((v or "0").replace(",", "") or 0)


def _reads(src: str) -> set[str]:
    """Registers an instruction reads (its operands after the destination), with vector register groups."""
    body = re.sub(r"^@!?U?P\w+\s+", "", src.strip())
    ops = body.split(None, 1)[1] if " " in body else ""
    regs = re.findall(r"\bR(\d+)\b", ops)
    return {f"R{r}" for r in regs[1:]} if regs else set()


def _writes(src: str) -> set[str]:
    m = _LOAD.search(src)
    if not m:
        return set()
    base = int(m.group(1)[1:])
    opcode = re.sub(r"^@!?U?P\w+\s+", "", src.strip()).split()[0]
    width = 4 if opcode.endswith(".128") else 2 if opcode.endswith(".64") else 1
    return {f"R{base + i}" for i in range(width)}


def summarize_block(rows: list[dict], top: int) -> dict:
    samples = [_num(r.get("Warp Stall Sampling (All Samples)")) for r in rows]
    total = sum(samples) or 1.0
    reasons = collections.Counter()
    for r in rows:
        for k, v in r.items():
            if k.startswith("stall_") and "Not Issued" not in k:
                reasons[k[len("stall_"):]] += _num(v)
    order = sorted(range(len(rows)), key=lambda i: -samples[i])[:top]
    tops = []
    for i in order:
        r = rows[i]
        why = {k[len("stall_"):]: _num(v) for k, v in r.items()
               if k.startswith("stall_") and "Not Issued" not in k and _num(v) > 0}
        fed = None
        reads = _reads(r["Source"])
        for j in range(i - 1, -1, -1):  # nearest earlier load writing a register this instruction reads
            if _writes(rows[j]["Source"]) & reads:
                fed = rows[j]["Source"].strip()
                break
        tops.append({"sass": r["Source"].strip(), "samples": samples[i], "share": samples[i] / total,
                     "executed": _num(r.get("Instructions Executed")),
                     "reasons": dict(sorted(why.items(), key=lambda kv: -kv[1])[:3]), "fed_by": fed})
    return {"instructions": len(rows), "samples": total,
            "warp_instructions_executed": sum(_num(r.get("Instructions Executed")) for r in rows),
            "reason_share": {k: v / total for k, v in reasons.most_common(8)}, "top": tops}


def read_blocks(path: Path) -> list[tuple[str, list[dict]]]:
    raw = lzma.open(path, "rt").read() if path.suffix == ".xz" else path.read_text()
    parts = re.split(r'^"Kernel Name",', raw, flags=re.M)[1:]
    out = []
    for part in parts:
        name, rest = part.split("\n", 1)
        out.append((name.strip().strip(",").strip('"'), list(csv.DictReader(io.StringIO(rest)))))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path)
    p.add_argument("--windows", type=Path, default=None)
    p.add_argument("--top", type=int, default=6)
    args = p.parse_args(argv)
    if not args.source.is_file():
        raise SystemExit(f"source: expected an ncu source-page CSV (optionally .xz), got {str(args.source)!r}")
    blocks = read_blocks(args.source)
    windows = json.loads(args.windows.read_text())["windows"] if args.windows else []
    out = []
    for n, (name, rows) in enumerate(blocks):
        out.append({"launch": n, "kernel": name, **summarize_block(rows, args.top)})
    json.dump({"source": args.source.name, "windows": windows, "launches": out}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
