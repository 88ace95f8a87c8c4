"""One self-contained ``report.html`` per run folder, to attach to a GitHub issue.

The page reads only the run folder: ``summary.json``, ``environment.json``, ``results/NN_*.json``
and the executed ``NN_*.ipynb``. In order:

1. summary: the command line, when, and each notebook's status, wall time and error line;
2. environment: GPU, driver, CUDA, host, Python, package versions, nvccs, relevant env variables;
3. the verdict box of every notebook (``results/NN_*.json`` key ``"answer"``, written by
   :mod:`sm120lab.answer`), or why there is none;
4. every notebook: markdown, collapsed code, and outputs, with figures inline as ``data:`` URIs.

Figures of an archived run (PNG files in ``figures/``, see :mod:`sm120lab.run_archive`) are inlined
too, so the report of an archived run is as complete as the original's. Nothing is fetched from
the network; the page has no scripts.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

from .atomic_io import write_text_atomic
from .envinfo import provenance_text
from .results import NotebookStatus, SchemaError, load_json, validate_results, validate_summary

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: output metadata key that points an archived figure output at its PNG file
FIGURE_META = "sm120lab_figure"
IMAGE_MIME = ("image/png", "image/jpeg", "image/svg+xml")
STATUS_COLOURS = {"ok": "#1a7f37", "warn": "#9a6700", "bad": "#cf222e", "info": "#0969da", "not_run": "#6e7781",
                  "not run": "#6e7781", "failed": "#cf222e"}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1f2328;line-height:1.45}
h1{font-size:1.6em}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #d0d7de;padding:.25em .5em;
text-align:left;vertical-align:top}th{background:#f6f8fa}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:.82em;white-space:pre-wrap;word-break:break-word}
pre.error{background:#ffebe9}.badge{color:#fff;border-radius:.8em;padding:0 .6em;font-size:.85em;white-space:nowrap}
img{max-width:100%;height:auto}details>summary{cursor:pointer;color:#57606a;font-size:.85em}
section.nb{border-top:3px solid #d0d7de;margin-top:2.5em}.muted{color:#57606a}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _text(value: Any) -> str:
    """Notebook text fields are a string or a list of lines."""
    return "".join(value) if isinstance(value, list) else str(value or "")


def _badge(status: Any) -> str:
    colour = STATUS_COLOURS.get(str(status), "#6e7781")
    return f'<span class="badge" style="background:{colour}">{_e(status)}</span>'


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _markdown(text: str) -> str:
    import mistune

    return mistune.html(text)


def _img(mime: str, payload: str) -> str:
    if mime == "image/svg+xml":
        payload = base64.b64encode(payload.encode("utf-8")).decode("ascii")
    payload = "".join(payload.split())
    return f'<img alt="figure" src="data:{mime};base64,{payload}">'


def figure_file_html(path: Path) -> str:
    """An ``<img>`` with the PNG file inlined, or a note when it is missing."""
    if not path.is_file():
        return f'<p class="muted">figure file missing: {_e(path.name)}</p>'
    return _img("image/png", base64.b64encode(path.read_bytes()).decode("ascii"))


def render_output(out: dict[str, Any], base: Path) -> str:
    """One cell output as HTML: figures inline, HTML tables as they are, text without ANSI codes."""
    kind = out.get("output_type")
    if kind == "stream":
        return f"<pre>{_e(ANSI.sub('', _text(out.get('text'))))}</pre>"
    if kind == "error":
        tb = "\n".join(ANSI.sub("", line) for line in out.get("traceback") or [])
        tb = tb or f"{out.get('ename')}: {out.get('evalue')}"
        return f'<pre class="error">{_e(tb)}</pre>'
    data = out.get("data") or {}
    figure = (out.get("metadata") or {}).get(FIGURE_META)
    if isinstance(figure, str):
        return figure_file_html(base / figure)
    for mime in IMAGE_MIME:
        if mime in data:
            return _img(mime, _text(data[mime]))
    if "text/html" in data:
        return f"<div>{_text(data['text/html'])}</div>"
    if "text/markdown" in data:
        return _markdown(_text(data["text/markdown"]))
    if "text/plain" in data:
        return f"<pre>{_e(ANSI.sub('', _text(data['text/plain'])))}</pre>"
    return ""


def render_notebook(nb: dict[str, Any], base: Path) -> str:
    """The body of one executed notebook (markdown, collapsed code, outputs)."""
    parts = []
    for cell in nb.get("cells") or []:
        source = _text(cell.get("source"))
        if cell.get("cell_type") == "markdown":
            parts.append(_markdown(source))
        elif cell.get("cell_type") == "code":
            if source.strip():
                parts.append(f"<details><summary>code</summary><pre>{_e(source)}</pre></details>")
            parts.extend(render_output(o, base) for o in cell.get("outputs") or [])
    return "\n".join(parts)


def _read(path: Path, validate) -> tuple[Any, str | None]:
    try:
        return validate(load_json(path), path), None
    except SchemaError as exc:
        return None, str(exc)


def _environment_html(env: dict[str, Any]) -> str:
    gpu = env.get("gpu") or {}
    rows = [["sm120lab", _e(provenance_text(env))], ["host", _e(env.get("host"))], ["OS", _e(env.get("os"))],
            ["Python", _e(env.get("python"))]]
    if gpu.get("available"):
        mem = gpu.get("total_memory_bytes")
        rows += [["GPU", _e(f"{gpu.get('name')} x{gpu.get('device_count', 1)}")],
                 ["compute capability", _e(gpu.get("compute_capability"))], ["driver", _e(gpu.get("driver"))],
                 ["CUDA runtime (torch)", _e(gpu.get("torch_cuda_runtime"))],
                 ["memory", _e(f"{mem / 2**30:.1f} GiB" if isinstance(mem, (int, float)) else mem)],
                 ["shared memory per block (opt-in)", _e(gpu.get("shared_memory_per_block_optin"))]]
    else:
        rows.append(["GPU", _e(f"none ({gpu.get('reason', 'not recorded')})")])
    packages = env.get("packages") or {}
    rows.append(["packages", _e(", ".join(f"{k} {v}" for k, v in packages.items() if v) or "none recorded")])
    nvccs = env.get("nvcc") or []
    rows.append(["nvcc", _e(", ".join(f"{n.get('version')} ({n.get('path')})" for n in nvccs) or "none found")])
    variables = env.get("env") or {}
    rows.append(["environment variables", _e(", ".join(f"{k}={v}" for k, v in variables.items()) or "none set")])
    return _table(["", "this run"], rows)


def _answer_html(answer: list[dict[str, Any]]) -> str:
    rows = [[_e(a.get("claim")), f"<b>{_e(a.get('value'))}</b>", _badge(a.get("status")), _e(a.get("why"))]
            for a in answer]
    return _table(["claim", "on this machine", "status", "why"], rows)


def build_report(run_dir: str | Path, name: str | None = None) -> str:
    """The report page of ``run_dir`` as one HTML string (see the module docstring).

    Args:
        run_dir: the run folder.
        name: the run's name in the title (default: the folder's name; an archive being built in a
            temporary folder passes its final name).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``summary.json``.
        SchemaError: ``summary.json`` is malformed (one line naming it).
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder: no summary.json (made by `sm120lab run`)")
    summary = validate_summary(load_json(summary_path), summary_path)
    env: dict[str, Any] = {}
    env_note = ""
    if (run_dir / "environment.json").is_file():
        try:
            loaded = load_json(run_dir / "environment.json")
            env = loaded if isinstance(loaded, dict) else {}
        except SchemaError as exc:
            env_note = str(exc)
    name = name or run_dir.name
    books = summary["notebooks"]
    ok = sum(nb["status"] == NotebookStatus.OK for nb in books)
    gpu = (env.get("gpu") or {})
    machine = gpu.get("name") if gpu.get("available") else "CPU only"

    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>sm120lab run {_e(name)}</title>"
           f"<style>{CSS}</style></head><body>",
           f"<h1>sm120lab run <code>{_e(name)}</code></h1>",
           f"<p><b>{ok} of {len(books)}</b> notebooks ok on <b>{_e(machine)}</b>; started {_e(summary.get('started_utc'))}"
           + (f"; resumed {_e(', '.join(summary['resumed_utc']))}" if summary.get("resumed_utc") else "") + "</p>"]
    if summary.get("command"):
        out.append(f"<p>command: <code>{_e(summary['command'])}</code></p>")
    out.append("<h2>Summary</h2>")
    out.append(_table(["notebook", "status", "wall s", "error"],
                      [[f'<a href="#{_e(nb["name"])}">{_e(nb["name"])}</a>', _badge(nb["status"]),
                        _e(nb.get("wall_s")), _e(nb.get("error"))] for nb in books]))
    out.append("<h2>Environment</h2>")
    out.append(f'<p class="muted">{_e(env_note)}</p>' if env_note else _environment_html(env))

    out.append("<h2>Verdicts</h2>")
    results = {}
    for nb in books:
        path = run_dir / "results" / f"{nb['name']}.json"
        res, problem = _read(path, validate_results) if path.is_file() else (None, None)
        results[nb["name"]] = res
        out.append(f"<h3>{_e(nb['name'])} {_badge(nb['status'])}</h3>")
        if problem:
            out.append(f'<p class="muted">results unreadable: {_e(problem)}</p>')
        elif res and res.get("answer"):
            out.append(_answer_html(res["answer"]))
        else:
            why = (f"the notebook {nb['status']}" + (f": {nb['error']}" if nb.get("error") else "")
                   if nb["status"] != NotebookStatus.OK else "the notebook recorded no verdict box")
            out.append(f'<p class="muted">no verdict box: {_e(why)}</p>')

    for nb in books:
        out.append(f'<section class="nb" id="{_e(nb["name"])}"><h2>{_e(nb["name"])} {_badge(nb["status"])}</h2>')
        ipynb = run_dir / (nb.get("output") or f"{nb['name']}.ipynb")
        if not ipynb.is_file():
            out.append('<p class="muted">no executed notebook in this run folder</p></section>')
            continue
        try:
            body = render_notebook(json.loads(ipynb.read_text(encoding="utf-8")), run_dir)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError) as exc:
            body = f'<p class="muted">{_e(ipynb.name)} unreadable: {_e(exc)}</p>'
        out.append(body + "</section>")
    out.append("</body></html>\n")
    return "\n".join(out)


def write_report(run_dir: str | Path, out: str | Path | None = None, name: str | None = None) -> Path:
    """Write :func:`build_report` to ``out`` (default ``run_dir/report.html``) atomically; return the path."""
    run_dir = Path(run_dir)
    return write_text_atomic(Path(out) if out else run_dir / "report.html", build_report(run_dir, name))
