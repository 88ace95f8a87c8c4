"""Archive a run folder into ``data/runs/`` for the write-up, with its evidence intact.

Kept whole: ``summary.json``, ``environment.json``, ``results/`` and every text output. Every
figure becomes a PNG file in ``figures/`` (``NN_name-cCCC-K.png``; downscaled to at most
:data:`MAX_FIGURE_PX` pixels wide when larger), and its notebook output points at that file
(output metadata ``sm120lab_figure`` plus a markdown image link), so the archived notebook stays
small and the figure is never reduced to its ``<Figure size ...>`` text. Each notebook's page is
rendered again from the archived notebook (:mod:`sm120lab.runs.pages`, no scripts), and
``report.html`` (:mod:`sm120lab.runs.report`) is written beside them under the archive's final name.

Every file is read through :mod:`sm120lab.runs.files` (a regular file of sane size inside the run
folder); a broken one stops the archive with one line naming it. An archive that exists already is
never replaced unless asked (``overwrite=True``), and then only when it is itself an archived run;
the new copy is built in ``<dest>.partial`` and swapped in only when complete, and nothing else
under ``dest_root`` is touched.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import shutil
from pathlib import Path
from typing import Any

from ..atomic_io import write_bytes_atomic, write_text_atomic
from .files import MAX_FIGURE_BYTES, MAX_JSON_BYTES, inside, read_bytes, regular_files
from .pages import STYLESHEET, read_notebook, write_stylesheet
from .records import NOTEBOOK_NAME
from .report import FIGURE_META, IMAGE_MAGIC, figure_path, write_report
from .results import SchemaError, load_json, validate_environment, validate_summary

MAX_FIGURE_PX = 1600
RASTER_MIME = {"image/png": "png", "image/jpeg": "jpg"}


def compact_png(raw: bytes, max_px: int) -> bytes:
    """``raw`` (PNG or JPEG bytes) as a small PNG at most ``max_px`` wide (aspect ratio kept).

    Transparent pixels are flattened onto white; an image of at most 256 colours becomes a palette
    PNG with exactly its colours (lossless), a richer one a 256-colour median-cut palette (plots
    stay sharp; the numbers live in ``results/``). The smaller of that and a plain optimised PNG is
    kept.
    """
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as im:
        im.load()
        if im.width > max_px:
            im = im.resize((max_px, max(1, round(im.height * max_px / im.width))), Image.LANCZOS)
        rgba = im.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    rgb = Image.alpha_composite(white, rgba).convert("RGB")
    arr = np.asarray(rgb, dtype=np.uint32)
    codes = (arr[..., 0] << 16) | (arr[..., 1] << 8) | arr[..., 2]
    colours, index = np.unique(codes, return_inverse=True)
    if len(colours) <= 256:
        pal = Image.fromarray(index.reshape(codes.shape).astype(np.uint8), mode="P")
        pal.putpalette([int(c >> s) & 0xFF for c in colours for s in (16, 8, 0)])
    else:
        pal = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    best = None
    for candidate in (pal, rgb):
        buf = io.BytesIO()
        candidate.save(buf, format="PNG", optimize=True)
        best = buf.getvalue() if best is None or len(buf.getvalue()) < len(best) else best
    return best


def _figure_bytes(payload: Any, mime: str, where: str) -> bytes:
    """Decode one figure output; :class:`SchemaError` naming ``where`` when it is not that image."""
    text = "".join(payload) if isinstance(payload, list) else payload
    if not isinstance(text, str):
        raise SchemaError(f"{where}: {mime} data must be base64 text, got {type(payload).__name__}")
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise SchemaError(f"{where}: {mime} data is not valid base64") from None
    if not raw.startswith(IMAGE_MAGIC[mime]):
        raise SchemaError(f"{where}: {mime} data is not a {RASTER_MIME[mime].upper()} image")
    return raw


def _carry_figure(run_dir: Path, rel: Any, figures_dir: Path, where: str) -> Path:
    """Copy a figure an archived notebook already points at (``figures/<name>`` inside ``run_dir``)."""
    path = figure_path(run_dir, rel)
    if path is None:
        raise SchemaError(f"{where}: figure {str(rel)[:80]!r} is not a file in the run's figures/")
    raw = read_bytes(path, MAX_FIGURE_BYTES, root=run_dir / "figures")
    if not raw.startswith(IMAGE_MAGIC["image/png"]):
        raise SchemaError(f"{path}: not a PNG file")
    return write_bytes_atomic(figures_dir / path.name, compact_png(raw, MAX_FIGURE_PX))


def extract_figures(nb: dict[str, Any], stem: str, figures_dir: Path, max_px: int = MAX_FIGURE_PX,
                    source: str | Path | None = None, run_dir: Path | None = None) -> list[Path]:
    """Move every raster figure of ``nb`` into ``figures_dir`` as PNG, in place; return the files written.

    Each figure output keeps its place in the notebook: its image data is replaced by a markdown link
    and a text line naming the file, and ``metadata["sm120lab_figure"]`` holds the relative path.
    A figure that already is such a link (an archived run archived again) is copied from ``run_dir``.

    Raises:
        SchemaError: a figure is not valid base64 or not the image it claims (names ``source``, the
            cell and the output).
    """
    from PIL import UnidentifiedImageError

    written = []
    for ci, cell in enumerate(nb.get("cells") or []):
        for k, out in enumerate(cell.get("outputs") or []):
            data = out.get("data") or {}
            mime = next((m for m in RASTER_MIME if m in data), None)
            meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
            if mime is None and FIGURE_META in meta and run_dir is not None:  # an archived run archived again
                written.append(_carry_figure(run_dir, meta[FIGURE_META], figures_dir, f"{source or stem}: cell {ci}"))
                continue
            if mime is None:
                continue
            where = f"{source or stem}: cell {ci} output {k}"
            raw = _figure_bytes(data[mime], mime, where)
            try:
                png = compact_png(raw, max_px)
            except (UnidentifiedImageError, OSError, ValueError) as exc:
                raise SchemaError(f"{where}: {mime} data cannot be decoded ({exc})") from None
            rel = f"figures/{stem}-c{ci:03d}-{k}.png"
            written.append(write_bytes_atomic(figures_dir / Path(rel).name, png))
            for m in RASTER_MIME:
                data.pop(m, None)
            data["text/markdown"] = f"![{stem} figure]({rel})"
            data["text/plain"] = f"[figure: {rel}]"
            out["metadata"] = {**{m: v for m, v in meta.items() if m not in RASTER_MIME}, FIGURE_META: rel}
    return written


def _copy(src: Path, dst: Path, root: Path) -> None:
    write_bytes_atomic(dst, read_bytes(src, MAX_JSON_BYTES, root))


def _check_paths(run_dir: Path, dest_root: Path, overwrite: bool) -> Path:
    """The archive's path for ``run_dir`` under ``dest_root``, after refusing every unsafe pairing."""
    if not run_dir.name or not NOTEBOOK_NAME.match(run_dir.name):
        raise FileNotFoundError(f"{run_dir}: its name is not usable for an archive (expected letters, digits, _ . + -)")
    if inside(dest_root, run_dir):
        raise FileExistsError(f"{dest_root} lies inside the run folder {run_dir}; choose a --dest outside it")
    dest = dest_root / run_dir.name
    if dest == run_dir or inside(run_dir, dest):
        raise FileExistsError(f"{run_dir} is already archived in {dest_root}")
    if dest.exists() or dest.is_symlink():
        if not overwrite:
            raise FileExistsError(f"{dest} exists (an earlier archive); pass --overwrite to replace it")
        if dest.is_symlink() or not dest.is_dir() or not (dest / "summary.json").is_file():
            raise FileExistsError(f"{dest} exists and is not an archived run; not replacing it")
    return dest


def archive_run(run_dir: str | Path, dest_root: str | Path, *, overwrite: bool = False,
                max_px: int = MAX_FIGURE_PX) -> Path:
    """Copy ``run_dir`` into ``dest_root/<run folder name>`` with figures as files; return the new folder.

    Args:
        run_dir: a run folder (has ``summary.json``); ``.`` and ``RUN/sub/..`` resolve to their folder.
        dest_root: where archives live (``data/runs``); not inside ``run_dir``.
        overwrite: replace an existing archive of the same name (else ``FileExistsError``).
        max_px: widest figure kept; larger ones are downscaled.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run folder.
        FileExistsError: the archive exists and ``overwrite`` is false, or is not an archive, or the
            paths overlap; nothing was changed.
        SchemaError: a file of the run is unreadable or malformed (one line naming it); nothing was
            left behind.
    """
    run_dir = Path(run_dir).resolve()
    if not (run_dir / "summary.json").exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no summary.json)")
    summary = validate_summary(load_json(run_dir / "summary.json", run_dir), run_dir / "summary.json")
    if (run_dir / "environment.json").exists():
        validate_environment(load_json(run_dir / "environment.json", run_dir), run_dir / "environment.json")
    dest_root = Path(dest_root).resolve()
    dest = _check_paths(run_dir, dest_root, overwrite)
    notebooks = [run_dir / f"{nb['name']}.ipynb" for nb in summary["notebooks"]]
    notebooks = [p for p in notebooks if p.exists() or p.is_symlink()]
    parsed = {p.stem: read_notebook(p, run_dir) for p in notebooks}  # every notebook readable before writing
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.is_symlink() or tmp.is_file():
        raise FileExistsError(f"{tmp} exists and is not an unfinished archive of ours; move it away")
    if tmp.exists():  # a crashed earlier archive attempt of ours
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        for name in ("summary.json", "environment.json"):
            if (run_dir / name).exists():
                _copy(run_dir / name, tmp / name, run_dir)
        if (run_dir / "results").is_dir():
            for f in regular_files(run_dir / "results"):
                _copy(f, tmp / "results" / f.name, run_dir)
        _write_notebooks(parsed, run_dir, tmp, max_px)
        write_stylesheet(tmp)
        write_report(tmp, name=dest.name, bodies=False)
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


def _write_notebooks(parsed: dict[str, Any], run_dir: Path, tmp: Path, max_px: int) -> None:
    """Each notebook with its figures moved to ``figures/``, and its page rendered again from it."""
    import nbformat

    from .pages import render_page

    for stem, node in parsed.items():
        nb = json.loads(nbformat.writes(node))
        extract_figures(nb, stem, tmp / "figures", max_px, source=run_dir / f"{stem}.ipynb", run_dir=run_dir)
        write_text_atomic(tmp / f"{stem}.ipynb", json.dumps(nb, indent=1) + "\n")
        page = render_page(nbformat.reads(json.dumps(nb), as_version=4), stylesheet=STYLESHEET, title=stem)
        write_text_atomic(tmp / f"{stem}.html", page)
