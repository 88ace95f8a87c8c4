"""Figure: shared memory of every SM120 grouped-GEMM config, stacked by what uses it."""

from __future__ import annotations

from pathlib import Path

from .analysis import SM120_SMEM_LIMIT, configs
from .store import DATA_DIR, recorded

PNG_NAME = "stage_bytes.png"


def plot_stage_bytes(ax=None, *, patched: bool = False, data_dir: Path | None = None, act: str = "nvfp4",
                     save: bool | None = None):
    """Stacked bars per (FlashInfer version, tile, epilogue, swap_ab) from data/cutlass_smem/*.json.

    Each bar: one segment per pipeline stage (the bytes per stage), the epilogue tensors, the
    kernel's pipelines + scheduler + tensormaps, and the alignment padding; the dashed line is
    SM120's 101,376 B. ``patched=True`` plots the recorded patched results instead. With
    ``ax=None`` a new figure is made and saved as ``data/cutlass_smem/stage_bytes.png``
    (``save`` overrides). Returns the axes. Raises FileNotFoundError when nothing is recorded.
    """
    import matplotlib.pyplot as plt

    results = [r for r in recorded(data_dir) if r["patched"] == patched]
    if not results:
        raise FileNotFoundError(f"no recorded {'patched ' if patched else ''}results in {data_dir or DATA_DIR}; "
                                "run: sm120lab cutlass-smem")
    bars = []
    for res in results:
        for d in configs(res):
            if d["act_type"] == act:
                bars.append((res["flashinfer_version"], d))
    made = ax is None
    if made:
        fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * len(bars) + 2), 5.2))
    colors = {"stage": ("#4c72b0", "#6f8fca"), "epi": "#dd8452", "other": "#8c8c8c", "pad": "#c44e52"}
    labels_done = set()

    def seg(x, bottom, h, color, label, **kw):
        lab = label if label not in labels_done else None
        labels_done.add(label)
        ax.bar(x, h, bottom=bottom, color=color, width=0.8, label=lab, edgecolor="white", linewidth=0.4, **kw)
        return bottom + h

    ticks = []
    for x, (version, d) in enumerate(bars):
        y = 0
        for s in range(d["stages"]):
            y = seg(x, y, d["stage_bytes"], colors["stage"][s % 2], "mainloop: one stage (A+B+SFA+SFB)")
        y = seg(x, y, d["epilogue_tensors"], colors["epi"], "epilogue tensors")
        y = seg(x, y, d["other_bytes"] + 0, colors["other"], "pipelines + scheduler + tensormaps")
        y = seg(x, y, d["padding"], colors["pad"], "alignment padding (1024 B)")
        if not d["fits"]:
            ax.bar(x, y, width=0.8, fill=False, edgecolor=colors["pad"], linewidth=1.5)
        ax.text(x, y + 600, f"{d['stages']}" if d["fits"] else f"{d['stages']}\n+{d['over_by']}", ha="center",
                va="bottom", fontsize=7, color="black" if d["fits"] else colors["pad"],
                fontweight="normal" if d["fits"] else "bold")
        ticks.append(f"{version} {d['tile']} {d['epilogue'][:3]} sw{d['swap_ab']}")
    ax.axhline(SM120_SMEM_LIMIT, color="black", linestyle="--", linewidth=1)
    ax.text(-0.5, SM120_SMEM_LIMIT + 5200, "SM120 limit 101,376 B (dashed)", ha="left", va="bottom", fontsize=8,
            bbox=dict(facecolor="white", edgecolor="none", pad=1))
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels(ticks, rotation=90, fontsize=7)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    ax.set_ylim(0, SM120_SMEM_LIMIT * 1.17)
    ax.set_ylabel("sizeof(GemmKernel::SharedStorage) [bytes]")
    ax.set_title(f"FlashInfer SM120 {act.upper()} grouped GEMM shared memory by config"
                 f"{' (stage-count patch applied)' if patched else ''}"
                 "\nnumber above bar = pipeline stages (red: over the limit by N bytes)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), framealpha=0.9)
    if save if save is not None else made:
        out = Path(data_dir or DATA_DIR) / (PNG_NAME if not patched else PNG_NAME.replace(".png", "_patched.png"))
        ax.figure.tight_layout()
        import io

        from ..atomic_io import write_bytes_atomic
        buf = io.BytesIO()
        ax.figure.savefig(buf, format="png", dpi=130)
        write_bytes_atomic(out, buf.getvalue(), mode=0o644)
    return ax


def stage_bytes_figure(data_dir: Path | None = None):
    """Notebook 02's figure: :func:`plot_stage_bytes` of every recorded unpatched kernel config (stacked
    ``stages x stage bytes + epilogue + other + padding`` against SM120's 101,376 B) on a 14 x 5.5 in
    figure with the x axis named; nothing saved.

    Args:
        data_dir: where the results are recorded (default ``data/cutlass_smem/``).

    Returns:
        The matplotlib figure, or None when no unpatched result is recorded.
    """
    import matplotlib.pyplot as plt

    if not any(not r["patched"] for r in recorded(data_dir)):
        return None
    fig, ax = plt.subplots(figsize=(14, 5.5))
    plot_stage_bytes(ax=ax, data_dir=data_dir)
    ax.set_xlabel("kernel config: FlashInfer version, tile MxNxK, epilogue, swap-AB")
    fig.tight_layout()
    return fig
