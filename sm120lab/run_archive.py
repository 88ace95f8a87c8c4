"""Archive a run folder into ``data/runs/`` for the write-up, with its evidence intact.

Kept whole: ``summary.json``, ``environment.json``, ``results/``, the HTML renders and every text
output. Every figure becomes a PNG file in ``figures/`` (``NN_name-cCCC-K.png``; downscaled to at
most :data:`MAX_FIGURE_PX` pixels wide when larger), and its notebook output points at that file
(output metadata ``sm120lab_figure`` plus a markdown image link), so the archived notebook stays
small and the figure is never reduced to its ``<Figure size ...>`` text. A self-contained
``report.html`` (:mod:`sm120lab.report`) is written beside them.

An archive that exists already is never replaced unless asked (``overwrite=True``); the new copy
is built in ``<dest>.partial`` and swapped in only when complete.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path
from typing import Any

from .atomic_io import write_bytes_atomic, write_text_atomic
from .report import FIGURE_META, write_report
from .results import load_json, validate_summary

MAX_FIGURE_PX = 1600
RASTER_MIME = {"image/png": "png", "image/jpeg": "jpg"}


def _downscaled_png(raw: bytes, max_px: int) -> bytes:
    """``raw`` (PNG or JPEG bytes) as PNG, at most ``max_px`` wide (aspect ratio kept)."""
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as im:
        if im.width <= max_px and im.format == "PNG":
            return raw
        if im.width > max_px:
            im = im.resize((max_px, max(1, round(im.height * max_px / im.width))), Image.LANCZOS)
        buf = io.BytesIO()
        im.save(buf, format="PNG", optimize=True)
        return buf.getvalue()


def extract_figures(nb: dict[str, Any], stem: str, figures_dir: Path, max_px: int = MAX_FIGURE_PX) -> list[Path]:
    """Move every raster figure of ``nb`` into ``figures_dir`` as PNG, in place; return the files written.

    Each figure output keeps its place in the notebook: its image data is replaced by a markdown link
    and a text line naming the file, and ``metadata["sm120lab_figure"]`` holds the relative path.
    """
    written = []
    for ci, cell in enumerate(nb.get("cells") or []):
        for k, out in enumerate(cell.get("outputs") or []):
            data = out.get("data") or {}
            mime = next((m for m in RASTER_MIME if m in data), None)
            if mime is None:
                continue
            payload = data[mime]
            raw = base64.b64decode("".join(payload) if isinstance(payload, list) else payload)
            rel = f"figures/{stem}-c{ci:03d}-{k}.png"
            written.append(write_bytes_atomic(figures_dir / Path(rel).name, _downscaled_png(raw, max_px)))
            for m in RASTER_MIME:
                data.pop(m, None)
            data["text/markdown"] = f"![{stem} figure]({rel})"
            data["text/plain"] = f"[figure: {rel}]"
            out.setdefault("metadata", {})
            out["metadata"] = {**{m: v for m, v in out["metadata"].items() if m not in RASTER_MIME}, FIGURE_META: rel}
    return written


def archive_run(run_dir: str | Path, dest_root: str | Path, *, overwrite: bool = False,
                max_px: int = MAX_FIGURE_PX) -> Path:
    """Copy ``run_dir`` into ``dest_root/<run folder name>`` with figures as files; return the new folder.

    Args:
        run_dir: a run folder (has ``summary.json``).
        dest_root: where archives live (``data/runs``).
        overwrite: replace an existing archive of the same name (else ``FileExistsError``).
        max_px: widest figure kept; larger ones are downscaled.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder.
        FileExistsError: the archive exists and ``overwrite`` is false; nothing was changed.
        SchemaError: ``summary.json`` is malformed.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no summary.json)")
    validate_summary(load_json(run_dir / "summary.json"), run_dir / "summary.json")
    dest = Path(dest_root) / run_dir.name
    if dest.resolve() == run_dir.resolve():
        raise FileExistsError(f"{run_dir} is already in {dest_root}")
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} exists (an earlier archive); pass --overwrite to replace it")
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():  # a crashed earlier archive attempt of ours
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        for name in ("summary.json", "environment.json"):
            if (run_dir / name).exists():
                shutil.copy2(run_dir / name, tmp / name)
        if (run_dir / "results").is_dir():
            shutil.copytree(run_dir / "results", tmp / "results")
        for html_path in sorted(run_dir.glob("[0-9][0-9]_*.html")):
            shutil.copy2(html_path, tmp / html_path.name)
        for nb_path in sorted(run_dir.glob("[0-9][0-9]_*.ipynb")):
            nb = json.loads(nb_path.read_text(encoding="utf-8"))
            extract_figures(nb, nb_path.stem, tmp / "figures", max_px)
            write_text_atomic(tmp / nb_path.name, json.dumps(nb, indent=1) + "\n")
        write_report(tmp, name=dest.name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dest.exists():
        old = dest.with_name(dest.name + ".replaced")
        if old.exists():
            shutil.rmtree(old)
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old)
    else:
        tmp.rename(dest)
    return dest
