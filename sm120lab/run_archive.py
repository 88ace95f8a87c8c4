"""Archive a run folder into ``data/runs/`` for the write-up: results, environment and summary kept
whole; executed notebooks kept with bulky outputs (images, HTML, long text) replaced by a one-line
note; HTML renders dropped (they can be rebuilt from the notebooks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .atomic_io import write_text_atomic

BULKY_MIME = ("image/png", "image/jpeg", "image/svg+xml", "text/html", "application/javascript")


def trim_notebook(nb: dict, max_text: int = 4000) -> dict:
    """Drop image/HTML outputs and cut long text outputs, in place; returns ``nb``."""
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data:
                dropped = [m for m in list(data) if m in BULKY_MIME]
                for m in dropped:
                    del data[m]
                if dropped and "text/plain" not in data:
                    data["text/plain"] = f"[{', '.join(dropped)} output trimmed for the archive]"
            if out.get("output_type") == "stream":
                text = "".join(out.get("text", ""))
                if len(text) > max_text:
                    out["text"] = text[:max_text] + f"\n[... {len(text) - max_text} characters trimmed]\n"
    return nb


def archive_run(run_dir: str | Path, dest_root: str | Path) -> Path:
    """Copy ``run_dir`` into ``dest_root/<run folder name>`` trimmed; returns the new folder."""
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no summary.json)")
    dest = Path(dest_root) / run_dir.name
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name in ("summary.json", "environment.json"):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, tmp / name)
    if (run_dir / "results").is_dir():
        shutil.copytree(run_dir / "results", tmp / "results")
    for nb_path in sorted(run_dir.glob("*.ipynb")):
        nb = trim_notebook(json.loads(nb_path.read_text()))
        write_text_atomic(tmp / nb_path.name, json.dumps(nb, indent=1) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest
