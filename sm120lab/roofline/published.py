"""Published tok/s figures (``data/published/*.csv``), one row per reported number.

Columns: source, source_url, date, hardware, gpu, n_gpus, tp, pp, model, checkpoint, backend,
vllm_moe_backend (the ``--moe-backend`` choice the reported backend is, empty when unstated), moe_kernel, cuda, concurrency, tok_s_low, tok_s_high, tok_s_basis ('per_user' | 'aggregate'),
correct_output ('yes' | 'no' | 'unknown'), notes. A reported range "46-49" is kept as low/high;
``tok_s`` (added on load) is their midpoint, empty where the run produced no usable output; a page that
shows it names it so (:func:`reported_tok_s`).
"""

from __future__ import annotations

from pathlib import Path

from sm120lab.paths import data_dir

COLUMNS = ("source", "source_url", "date", "hardware", "gpu", "n_gpus", "tp", "pp", "model",
           "checkpoint", "backend", "vllm_moe_backend", "moe_kernel", "cuda", "concurrency", "tok_s_low", "tok_s_high",
           "tok_s_basis", "correct_output", "notes")


def load_published(directory: str | Path | None = None):
    """All ``*.csv`` under ``data/published/`` concatenated, validated, with ``tok_s`` and
    ``per_user_tok_s`` (aggregate figures divided by concurrency) added."""
    import pandas as pd

    directory = Path(directory) if directory is not None else data_dir() / "published"
    files = sorted(directory.glob("*.csv"))
    if not files:
        raise FileNotFoundError(f"no published CSV files under {directory}")
    frames = []
    for f in files:
        df = pd.read_csv(f, dtype={"cuda": str, "date": str, "vllm_moe_backend": str}, keep_default_na=False,
                         na_values={"tok_s_low": [""], "tok_s_high": [""]})
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"{f}: missing columns {missing}")
        bad = df[~df["source_url"].astype(str).str.startswith("http")]
        if len(bad):
            raise ValueError(f"{f}: rows without an http(s) source_url: {list(bad.index)}")
        if not set(df["correct_output"]).issubset({"yes", "no", "unknown"}):
            raise ValueError(f"{f}: correct_output must be yes/no/unknown")
        if not set(df["tok_s_basis"]).issubset({"per_user", "aggregate"}):
            raise ValueError(f"{f}: tok_s_basis must be per_user/aggregate")
        df["file"] = f.name
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["tok_s"] = (out["tok_s_low"] + out["tok_s_high"]) / 2.0
    agg = out["tok_s_basis"] == "aggregate"
    out["per_user_tok_s"] = out["tok_s"].where(~agg, out["tok_s"] / out["concurrency"])
    out["aggregate_tok_s"] = out["tok_s"].where(agg, out["tok_s"] * out["concurrency"])
    return out


def reported_tok_s(low, high, *, midpoint: bool = True) -> str:
    """A published tok/s as its source reported it: ``46-49`` for a range (``46-49 (midpoint 47.5)``
    with ``midpoint``, the number the workbook computes shares from), ``39`` for one number, ``-``
    where the run gave no usable output."""
    import math

    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(lo) or math.isnan(hi):
        return "-"
    if lo == hi:
        return f"{lo:g}"
    return f"{lo:g}-{hi:g}" + (f" (midpoint {(lo + hi) / 2:g})" if midpoint else "")
