"""One ``report.html`` per run folder, to attach to a GitHub issue (zipped: GitHub takes no .html).

The page reads only the run folder (:mod:`sm120lab.runs.files`: regular files of sane size inside
it): ``summary.json``, ``environment.json``, ``results/NN_*.json`` and the executed ``NN_*.ipynb``.
It is rendered from the Jinja2 template ``runs/templates/report.html.j2`` with autoescape on; the
only HTML passed through unescaped is notebook HTML and markdown after
:func:`sm120lab.runs.sanitize.clean_html`, figure ``<img>`` tags built here, the stylesheet, and the
decision guide's do-this block. In order:

1. the first screen: the decision guide's do-this block for the run's machine or the chosen GPU
   (:func:`do_this_html`), then one table of every notebook with its status and its one-line
   answer; above them only the title line (notebooks ok, machine, sm120lab commit) and, when the
   run was stopped, an "interrupted" banner;
2. the summary table (wall time, error line), the environment, and the whole decision guide for the
   same GPU (every item with its evidence, and one row per ``--moe-backend`` choice:
   :func:`guide_table_html`, the table ``docs/guide.md`` holds for the seed report's GPU);
3. the verdict box of every notebook (``results/NN_*.json`` key ``"answer"``), or why there is none;
4. every notebook: markdown, collapsed code, outputs, figures inline as ``data:`` URIs (or, for an
   archived run, as links to its ``figures/`` files).

A figure is shown only from the run folder's ``figures/`` (never a path leading out of it) and
only when its bytes are a PNG or JPEG. Nothing is fetched from the network; the page has no
scripts (:func:`sm120lab.runs.sanitize.active_content` is checked before it is written).
"""

from __future__ import annotations

import base64
import binascii
import re
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

from ..atomic_io import write_text_atomic
from ..envinfo import provenance_text
from .files import MAX_FIGURE_BYTES, MAX_NOTEBOOK_BYTES, read_bytes, read_json
from .results import NotebookStatus, SchemaError, load_json, validate_environment, validate_results, validate_summary
from .sanitize import active_content, clean_html

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: output metadata key that points an archived figure output at its PNG file
FIGURE_META = "sm120lab_figure"
IMAGE_MAGIC = {"image/png": (b"\x89PNG\r\n\x1a\n",), "image/jpeg": (b"\xff\xd8\xff",)}
#: answer statuses, worst first, for the one-line answer of a notebook
SEVERITY = ("bad", "warn", "ok", "info", "not_run")
TEMPLATES = Path(__file__).resolve().parent / "templates"


@lru_cache(maxsize=1)
def _jinja():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    return Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(default=True),
                       undefined=StrictUndefined, trim_blocks=False, lstrip_blocks=False)


def _text(value: Any) -> str:
    """Notebook text fields are a string or a list of lines."""
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return "" if value is None else str(value)


def _slug(status: Any) -> str:
    return re.sub(r"[^a-z_]+", "-", str(status).lower()).strip("-") or "unknown"


def _markdown(text: str):
    import mistune
    from markupsafe import Markup

    return Markup(clean_html(mistune.html(text)))


def image_src(mime: str, raw: bytes) -> str | None:
    """A ``data:`` URI for ``raw`` when its bytes are the ``mime`` they claim (PNG or JPEG), else None."""
    if not raw.startswith(IMAGE_MAGIC.get(mime, (b"\x00invalid",))):
        return None
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


def figure_path(run_dir: Path, rel: Any) -> Path | None:
    """The file an archived figure output names, when it is ``figures/<name>`` inside ``run_dir``."""
    if not isinstance(rel, str):
        return None
    pure = PurePosixPath(rel)
    if pure.is_absolute() or len(pure.parts) != 2 or pure.parts[0] != "figures" or pure.name in ("", ".", ".."):
        return None
    return run_dir / "figures" / pure.name


def _figure_block(run_dir: Path, rel: Any, inline: bool) -> dict[str, Any]:
    path = figure_path(run_dir, rel)
    if path is None:
        return {"kind": "note", "text": f"figure not shown: {str(rel)[:120]!r} is not a file in this run's figures/"}
    try:
        raw = read_bytes(path, MAX_FIGURE_BYTES, root=run_dir / "figures")
    except SchemaError as exc:
        return {"kind": "note", "text": f"figure not shown: {exc}"}
    src = image_src("image/png", raw)
    if src is None:
        return {"kind": "note", "text": f"figure not shown: {path.name} is not a PNG file"}
    return {"kind": "img", "src": f"figures/{path.name}" if not inline else src}


def _image_block(mime: str, payload: Any) -> dict[str, Any]:
    text = "".join(_text(payload).split())
    if mime == "image/svg+xml":
        uri = "data:image/svg+xml;base64," + base64.b64encode(_text(payload).encode("utf-8")).decode("ascii")
        return {"kind": "img", "src": uri}  # an SVG in <img> runs no script
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return {"kind": "note", "text": f"figure not shown: its {mime} data is not valid base64"}
    src = image_src(mime, raw)
    if src is None:
        return {"kind": "note", "text": f"figure not shown: its {mime} data is not a {mime.split('/')[1].upper()} image"}
    return {"kind": "img", "src": src}


def output_blocks(out: Any, run_dir: Path, inline: bool = True) -> list[dict[str, Any]]:
    """One cell output as template blocks: figures, sanitized HTML, text without ANSI codes."""
    from markupsafe import Markup

    if not isinstance(out, dict):
        return [{"kind": "note", "text": f"output not shown: expected an object, got {type(out).__name__}"}]
    kind = out.get("output_type")
    if kind == "stream":
        return [{"kind": "text", "text": ANSI.sub("", _text(out.get("text")))}]
    if kind == "error":
        tb = out.get("traceback")
        lines = [ANSI.sub("", _text(t)) for t in tb] if isinstance(tb, list) else []
        return [{"kind": "error", "text": "\n".join(lines) or f"{_text(out.get('ename'))}: {_text(out.get('evalue'))}"}]
    data = out.get("data") if isinstance(out.get("data"), dict) else {}
    meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
    if FIGURE_META in meta:
        return [_figure_block(run_dir, meta[FIGURE_META], inline)]
    for mime in ("image/png", "image/jpeg", "image/svg+xml"):
        if mime in data:
            return [_image_block(mime, data[mime])]
    if "text/html" in data:
        return [{"kind": "html", "html": Markup(clean_html(_text(data["text/html"])))}]
    if "text/markdown" in data:
        return [{"kind": "html", "html": _markdown(_text(data["text/markdown"]))}]
    if "text/plain" in data:
        return [{"kind": "text", "text": ANSI.sub("", _text(data["text/plain"]))}]
    return []


def notebook_blocks(nb: Any, run_dir: Path, inline: bool = True) -> list[dict[str, Any]]:
    """Every cell of an executed notebook as template blocks (markdown, collapsed code, outputs)."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return [{"kind": "note", "text": "not a notebook: no list of cells"}]
    blocks: list[dict[str, Any]] = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            continue
        source = _text(cell.get("source"))
        if cell.get("cell_type") == "markdown":
            blocks.append({"kind": "html", "html": _markdown(source)})
        elif cell.get("cell_type") == "code":
            if source.strip():
                blocks.append({"kind": "code", "text": source})
            outputs = cell.get("outputs") if isinstance(cell.get("outputs"), list) else []
            for o in outputs:
                blocks.extend(output_blocks(o, run_dir, inline))
    return blocks


def _environment(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "environment.json"
    if not path.exists() and not path.is_symlink():
        return {"note": "no environment.json in this run folder", "rows": [], "env": {}}
    try:
        env = validate_environment(load_json(path, run_dir), path)
    except SchemaError as exc:
        return {"note": f"environment unreadable: {exc}", "rows": [], "env": {}}
    gpu = env.get("gpu") or {}
    rows = [("sm120lab", provenance_text(env)), ("host", env.get("host")), ("OS", env.get("os")),
            ("Python", env.get("python"))]
    if gpu.get("available"):
        mem = gpu.get("total_memory_bytes")
        rows += [("GPU", f"{gpu.get('name')} x{gpu.get('device_count', 1)}"),
                 ("compute capability", gpu.get("compute_capability")), ("driver", gpu.get("driver")),
                 ("CUDA runtime (torch)", gpu.get("torch_cuda_runtime")),
                 ("memory", f"{mem / 2**30:.1f} GiB" if isinstance(mem, (int, float)) else mem),
                 ("shared memory per block (opt-in)", gpu.get("shared_memory_per_block_optin"))]
    else:
        rows.append(("GPU", f"none ({gpu.get('reason') or 'not recorded'})"))
    packages = env.get("packages") or {}
    rows.append(("packages", ", ".join(f"{k} {v}" for k, v in packages.items() if v) or "none recorded"))
    nvccs = env.get("nvcc") or []
    rows.append(("nvcc", ", ".join(f"{n.get('version')} ({n.get('path')})" for n in nvccs) or "none found"))
    variables = env.get("env") or {}
    rows.append(("environment variables", ", ".join(f"{k}={v}" for k, v in variables.items()) or "none set"))
    return {"note": "", "rows": [(k, "" if v is None else str(v)) for k, v in rows], "env": env}


def headline(answer: list[dict[str, Any]] | None) -> tuple[str, str] | None:
    """``(status, "claim: value")`` of a verdict box's worst item (bad, then warn, ...), the first one
    among equals; with ``(+N more)`` when the box has more lines. None for no box."""
    if not answer:
        return None
    rank = {s: i for i, s in enumerate(SEVERITY)}
    worst = min(answer, key=lambda a: rank.get(str(a.get("status")), len(SEVERITY)))
    more = f" (+{len(answer) - 1} more)" if len(answer) > 1 else ""
    return str(worst.get("status")), f"{worst.get('claim')}: {worst.get('value', '')}{more}"


def _notebook(nb: dict[str, Any], run_dir: Path, inline: bool, body: bool = True) -> dict[str, Any]:
    name, status = nb["name"], str(nb["status"])
    path = run_dir / "results" / f"{name}.json"
    answer, problem = None, ""
    if path.exists() or path.is_symlink():
        try:
            answer = validate_results(load_json(path, run_dir), path).get("answer")
        except SchemaError as exc:
            problem = f"results unreadable: {exc}"
    if problem:
        no_answer = problem
    elif status != NotebookStatus.OK:
        no_answer = f"no verdict box: the notebook {status}" + (f": {nb['error']}" if nb.get("error") else "")
    else:
        no_answer = "no verdict box: the notebook recorded no verdict box"
    top = headline(answer)
    row_status = status if status != NotebookStatus.OK or top is None else top[0]
    ipynb = run_dir / (nb.get("output") or f"{name}.ipynb")
    if not body:
        blocks = []
    elif ipynb.exists() or ipynb.is_symlink():
        try:
            blocks = notebook_blocks(read_json(ipynb, MAX_NOTEBOOK_BYTES, run_dir), run_dir, inline)
        except SchemaError as exc:
            blocks = [{"kind": "note", "text": f"notebook unreadable: {exc}"}]
    else:
        blocks = [{"kind": "note", "text": "no executed notebook in this run folder"}]
    html = nb.get("html") or f"{name}.html"
    page = html if isinstance(html, str) and (run_dir / html).is_file() else None
    return {"name": name, "status": row_status, "status_class": _slug(row_status), "wall_s": nb.get("wall_s"),
            "error": nb.get("error"), "headline": top[1] if top else no_answer,
            "answer": [{"claim": a.get("claim"), "value": a.get("value", ""), "why": a.get("why", ""),
                        "status": a.get("status"), "status_class": _slug(a.get("status"))} for a in answer or []],
            "no_answer": no_answer, "blocks": blocks, "page": page}


def do_this_html(env: dict[str, Any] | None, gpu: str | None = None) -> tuple[str | None, str]:
    """The decision guide's do-this block (:func:`sm120lab.recommend.answer_block`) for ``gpu``, or
    for the run's machine (``env``, its environment.json) when ``gpu`` is None, as sanitized HTML.

    Returns:
        ``(html, note)`` (the note says when the block answers for the seed report's GPU because the
        run's machine is no SM120/SM121 GPU), or ``(None, why)`` when the guide cannot answer.

    Raises:
        ValueError: ``gpu`` was given and the guide does not know it (one line naming ``--gpu``).
    """
    try:
        from ..recommend import answer_block
    except ImportError as exc:  # pragma: no cover - the guide ships with the package
        return None, f"decision guide unavailable ({exc})"
    try:
        block = answer_block(gpu=gpu, machine=env or None)
        note = ""
        found = (env or {}).get("gpu") or {}
        if gpu is None and str(found.get("compute_capability")) not in ("12.0", "12.1"):
            here = found.get("name") if found.get("available") else "this CPU-only machine"
            note = (f"The run's machine ({here}) is not an SM120/SM121 GPU, so the block answers for the seed "
                    "report's setup; `sm120lab report RUN --gpu rtx-5090` (or dgx-spark) answers for another.")
        return clean_html(block.to_html()), note
    except ValueError as exc:
        if gpu is not None:
            raise ValueError(f"--gpu: {str(exc).removeprefix('gpu: ')}") from None
        return None, f"decision guide unavailable for this run's machine: {str(exc).splitlines()[0][:200]}"
    except Exception as exc:  # the guide must never cost the run its report
        if gpu is not None:
            raise ValueError(f"--gpu: the decision guide failed for {gpu}: {exc}") from None
        return None, f"decision guide unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def guide_table_html(env: dict[str, Any] | None, gpu: str | None = None) -> str | None:
    """Every item of the decision guide with its evidence, and the backend rows, as sanitized HTML, for
    the GPU the do-this block answers for (``gpu``, else the run's machine when it is an SM120/SM121
    GPU, else the seed report's); None when the guide cannot answer (the do-this block says why)."""
    try:
        from ..recommend import answer
        from ..recommend.facts import detect_gpu
        from ..recommend.render import to_html
    except ImportError:  # pragma: no cover - the guide ships with the package
        return None
    if gpu is None and env:
        try:
            gpu = detect_gpu(env)
        except ValueError:
            gpu = None
    try:
        return clean_html(to_html(answer(gpu or "rtx-pro-6000").items))
    except Exception:  # noqa: BLE001 - the guide must never cost the run its report
        return None


def build_report(run_dir: str | Path, name: str | None = None, *, inline_figures: bool = True,
                 bodies: bool = True, do_this: str | None = None, gpu: str | None = None) -> str:
    """The report page of ``run_dir`` as one HTML string (see the module docstring).

    Args:
        run_dir: the run folder.
        name: the run's name in the title (default: the folder's name; an archive being built in a
            temporary folder passes its final name).
        inline_figures: figures of an archived run inline as ``data:`` URIs (True) or as links to
            ``figures/*.png`` beside the page (False).
        bodies: every notebook's cells and outputs in the page (True: one self-contained page), or
            only a link to its own page beside the report (False: an archived run, whose pages
            exist).
        do_this: the decision guide's do-this block as HTML (sanitized here too); default: the
            guide's block for ``gpu``, or for the run's machine (:func:`do_this_html`).
        gpu: the GPU the do-this block answers for (``rtx-pro-6000``, ``rtx-5090``, ``dgx-spark``);
            default: the run's machine when it is an SM120/SM121 GPU, else the seed report's.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``summary.json``.
        SchemaError: ``summary.json`` is malformed (one line naming it).
        ValueError: ``gpu`` is not a GPU the guide knows.
    """
    from markupsafe import Markup

    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists() and not summary_path.is_symlink():
        raise FileNotFoundError(f"{run_dir} is not a run folder: no summary.json (made by `sm120lab run`)")
    summary = validate_summary(load_json(summary_path, run_dir), summary_path)
    environment = _environment(run_dir)
    found_gpu = environment["env"].get("gpu") or {}
    books = [_notebook(nb, run_dir, inline_figures, bodies) for nb in summary["notebooks"]]
    run = {"name": name or run_dir.resolve().name, "ok": sum(nb["status"] == NotebookStatus.OK for nb in summary["notebooks"]),
           "total": len(books), "machine": found_gpu.get("name") if found_gpu.get("available") else "CPU only",
           "started": summary.get("started_utc") or "not recorded", "resumed": summary.get("resumed_utc") or [],
           "command": summary.get("command"), "interrupted": bool(summary.get("interrupted")),
           "not_run": sum(nb["status"] == NotebookStatus.NOT_RUN for nb in summary["notebooks"]),
           "provenance": provenance_text(environment["env"]) if environment["env"] else "not recorded"}
    guide_note = ""
    if do_this is None:
        do_this, guide_note = do_this_html(environment["env"], gpu)
    else:
        do_this = clean_html(do_this)
    guide_table = guide_table_html(environment["env"], gpu) if do_this else None
    css = Markup((TEMPLATES / "report.css").read_text(encoding="utf-8"))
    page = _jinja().get_template("report.html.j2").render(
        run=run, notebooks=books, environment=environment, css=css, bodies=bodies,
        do_this=Markup(do_this) if do_this else None, guide_note=guide_note,
        guide_table=Markup(guide_table) if guide_table else None)
    found = active_content(page)
    if found:  # the sanitizer or the template let something through: never write it
        raise RuntimeError(f"report of {run_dir} would hold active content {found[:3]}; not written")
    return page


def write_report(run_dir: str | Path, out: str | Path | None = None, name: str | None = None,
                 inline_figures: bool = True, bodies: bool = True, gpu: str | None = None) -> Path:
    """Write :func:`build_report` to ``out`` (default ``run_dir/report.html``) atomically; return the path."""
    run_dir = Path(run_dir)
    page = build_report(run_dir, name, inline_figures=inline_figures, bodies=bodies, gpu=gpu)
    return write_text_atomic(Path(out) if out else run_dir / "report.html", page)
