"""The benchmark figure: each contender's MoE layer as % of the NVFP4 weight-byte floor vs T.

``% of floor = 100 * floor_us / us`` with ``floor_us`` = bytes of the active experts' NVFP4
weights (3HI x 0.5625 B each) over the copy bandwidth measured in the same run; 100% = streaming
the 4-bit weights once at copy speed. The same yardstick for every contender (the bf16 and FP8
peers move 3.6x and 1.8x more bytes, so their own ceilings sit lower).
"""

from __future__ import annotations

from pathlib import Path

from .records import BenchDoc, bench_doc


def pct_of_floor(doc: BenchDoc | dict, contender: str, op: str = "moe",
                 timing: str = "cuda_graph") -> list[tuple[int, float]]:
    """[(T, % of the NVFP4 weight-byte floor)] for one contender's CUDA-graph rows, sorted by T."""
    doc = bench_doc(doc)
    floors = doc.floor_us
    return sorted((r.T, 100.0 * floors[str(r.T)][op] / r.us_median)
                  for r in doc.rows_for(op, timing, contender=contender) if str(r.T) in floors)


def plot_moe(doc: BenchDoc | dict, path: str | Path | None = None, ax=None):
    """Draw % of floor vs T for every contender; save to ``path`` (PNG) when given. Returns the path or the axes."""
    import matplotlib

    doc = bench_doc(doc)

    if path is not None and ax is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
    names = sorted({r.contender for r in doc.rows_for(op="moe", timing=None)})
    for name in names:
        pts = pct_of_floor(doc, name)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                    linewidth=2.5 if name == "triton-w4a16" else 1.2)
    ax.axhline(100.0, color="k", linestyle="--", linewidth=1, label="NVFP4 weight bytes / copy BW")
    ax.axhline(100.0 / 1.35, color="grey", linestyle=":", linewidth=1, label="target: within 1.35x of floor")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens T")
    ax.set_ylabel("% of NVFP4 weight-byte floor (higher is better)")
    s = doc.shape
    gpu = doc.gpu or ""
    ax.set_title(f"{doc.model} MoE layer on {gpu} (E={s.get('E')}, k={s.get('k')}, H={s.get('H')}, "
                 f"I={s.get('I')})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if path is None:
        return ax
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=120)
    if own:
        plt.close(ax.figure)
    return path
