"""Time vs T per contender for the MoE layer, with the NVFP4 weight-byte floor (bytes of the
active experts' NVFP4 weights over the measured copy bandwidth)."""

from __future__ import annotations

from pathlib import Path


def plot_moe(doc: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = sorted({r["contender"] for r in doc["rows"] if r["op"] == "moe"})
    for name in names:
        pts = sorted((r["T"], r["us_median"]) for r in doc["rows"]
                     if r["contender"] == name and r["op"] == "moe" and not r["timing"].startswith("eager"))
        if not pts:
            pts = sorted((r["T"], r["us_median"]) for r in doc["rows"] if r["contender"] == name and r["op"] == "moe")
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    floor = sorted({(r["T"], r["weight_bytes"] / (doc["ceilings"]["copy_GBps"] * 1e3)) for r in doc["rows"]
                    if r["contender"].startswith("triton-w4a16") and r["op"] == "moe"})
    if floor:
        ax.plot([p[0] for p in floor], [p[1] for p in floor], "k--", label="NVFP4 weight bytes / copy BW")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens T")
    ax.set_ylabel("MoE layer time (us, median)")
    s = doc.get("shape", {})
    ax.set_title(f"{doc.get('model')} MoE (E={s.get('E')}, k={s.get('k')}, H={s.get('H')}, I={s.get('I')})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
