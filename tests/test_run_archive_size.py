"""An archived run stores one stylesheet, figures as compact PNG files, script-free notebook pages
that link both, and a report that links the pages: at least 5x smaller than the archives recorded
before (data/runs/*, which repeat the stylesheet and inline every figure in every page)."""

from __future__ import annotations

import json
from pathlib import Path

from sm120lab.runs.archive import archive_run
from sm120lab.runs.compare import compare_runs, load_run
from sm120lab.runs.sanitize import active_content

RECORDED = sorted(p for p in (Path(__file__).resolve().parents[1] / "data" / "runs").iterdir()
                  if (p / "summary.json").is_file())
# Bytes of the archives of the same seven notebooks in the format before this one (one stylesheet per
# page, every figure inlined in every page): `git ls-tree -r -l a106cd2 data/runs/<run>`, summed.
OLD_FORMAT_BYTES = {"h200": 8_619_083, "cpu": 8_396_337}


def _size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def test_an_archive_is_5x_smaller_with_one_stylesheet_and_the_same_evidence(tmp_path):
    run = RECORDED[-1]
    dest = archive_run(run, tmp_path)
    old = OLD_FORMAT_BYTES["h200" if "h200" in run.name else "cpu"]
    assert old >= 5 * _size(dest), (old, _size(dest))
    for recorded in RECORDED:  # every archive recorded now is in the small format too
        if (recorded / "notebook.css").is_file():
            assert OLD_FORMAT_BYTES["h200" if "h200" in recorded.name else "cpu"] >= 5 * _size(recorded), recorded
    assert [p.name for p in dest.rglob("*.css")] == ["notebook.css"]
    pages = sorted(dest.glob("[0-9][0-9]_*.html"))
    assert len(pages) == len(json.loads((run / "summary.json").read_text())["notebooks"])
    for page in pages:
        text = page.read_text()
        assert "<style" not in text and 'href="notebook.css"' in text and "data:image/png" not in text
        assert active_content(text) == []
    figures = sorted((dest / "figures").glob("*.png"))
    assert [f.name for f in figures] == sorted(f.name for f in (run / "figures").glob("*.png"))
    for name in ("summary.json", "environment.json", *(f"results/{f.name}" for f in (run / "results").iterdir())):
        assert (dest / name).read_bytes() == (run / name).read_bytes(), name
    assert compare_runs(load_run(run), load_run(dest)).changes == []  # the same verdicts and numbers
    report = (dest / "report.html").read_text()
    assert f"<title>sm120lab run {run.name}</title>" in report and active_content(report) == []
