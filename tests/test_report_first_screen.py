"""report.html answers on its first screen: the decision guide's do-this block for the run's machine
(or --gpu), then ONE table with every notebook's status and one-line answer, before anything else
(checked on the DOM order; a headless-Chromium screenshot at 1400x1000 shows both)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_run_hostile import cli

from sm120lab.runs.report import TEMPLATES, build_report, headline
from sm120lab.runs.sanitize import active_content


class Outline(HTMLParser):
    """The page's headings, tables and blocks in document order, as ``tag#id.class``."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h1", "h2", "table", "section", "div", "p") and (a.get("id") or tag != "p"):
            self.order.append(f"{tag}#{a.get('id') or ''}.{a.get('class') or ''}")


def run_folder(d: Path, gpu: dict) -> Path:
    (d / "results").mkdir(parents=True)
    books = [{"name": "01_a", "status": "ok"}, {"name": "02_b", "status": "ok"}, {"name": "03_c", "status": "failed",
                                                                                 "error": "RuntimeError: planted"}]
    (d / "summary.json").write_text(json.dumps({"schema_version": 2, "notebooks": books}))
    (d / "environment.json").write_text(json.dumps({"gpu": gpu, "packages": {"torch": "2.13.0"}}))
    (d / "results" / "01_a.json").write_text(json.dumps({"answer": [
        {"claim": "first claim", "value": "fine", "status": "ok", "why": ""},
        {"claim": "broken thing", "value": "garbage", "status": "bad", "why": "w"}]}))
    (d / "results" / "02_b.json").write_text(json.dumps({"answer": [
        {"claim": "only claim", "value": "42 us", "status": "info", "why": ""}]}))
    return d


def test_do_this_block_then_one_verdict_table_come_first(tmp_path):
    page = build_report(run_folder(tmp_path / "20260101T000000Z-box-cpu", {"available": False}))
    outline = Outline()
    outline.feed(page)
    order = outline.order
    assert order[0].startswith("h1")
    assert order[1] == "div#do-this.dothis" and "Do this:" in page
    first_table = next(i for i, x in enumerate(order) if x.startswith("table"))
    assert order[first_table] == "table#.verdicts" and order[first_table - 1] == "h2#verdicts-table."
    assert [x for x in order[:first_table] if x.startswith(("table", "section"))] == []
    # the do-this block's own nodes sit inside it; nothing else comes between the title and the table
    assert all(x.startswith(("h1", "div#do-this", "h2#verdicts-table", "p#guide")) or "do-this" in x or x == "h2#."
               for x in order[:first_table]), order[:first_table]
    rows = re.findall(r'<tr><td><a href="#(\w+)">', page)
    assert rows == ["01_a", "02_b", "03_c"]  # one row per notebook, in one table
    assert "broken thing: garbage (+1 more)" in page and "only claim: 42 us" in page
    assert "no verdict box: the notebook failed: RuntimeError: planted" in page
    assert page.index('class="verdicts"') < page.index("<h2>Summary") < page.index("<h2>Environment")
    assert "is not an SM120/SM121 GPU" in page and active_content(page) == []


def test_gpu_option_answers_for_the_chosen_gpu(tmp_path):
    run = run_folder(tmp_path / "R", {"available": False})
    page = build_report(run, gpu="rtx-5090")
    assert "RTX 5090" in page.split('id="verdicts-table"')[0] and "is not an SM120/SM121 GPU" not in page
    status, out = cli("report", str(run), "--gpu", "no-such-gpu")
    assert status != 0 and out.strip().startswith("--gpu:") and len(out.strip().splitlines()) == 1
    assert cli("report", str(run), "--gpu", "dgx-spark")[0] == 0
    assert "DGX Spark" in (run / "report.html").read_text().split('id="verdicts-table"')[0]


def test_a_sm120_machine_gets_its_own_block_without_the_note(tmp_path):
    run = run_folder(tmp_path / "R", {"available": True, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0"})
    page = build_report(run)
    assert "RTX 5090" in page.split('id="verdicts-table"')[0] and "is not an SM120/SM121 GPU" not in page


@pytest.mark.parametrize("answer, expected", [
    ([{"claim": "a", "value": "1", "status": "info"}], ("info", "a: 1")),
    ([{"claim": "a", "value": "1", "status": "ok"}, {"claim": "b", "value": "2", "status": "warn"}],
     ("warn", "b: 2 (+1 more)")),
    ([], None), (None, None)])
def test_headline_is_the_worst_line(answer, expected):
    assert headline(answer) == expected


def test_figures_and_guide_tables_fit_the_content_column():
    css = (TEMPLATES / "report.css").read_text()
    assert re.search(r"img,svg,video\{max-width:100%", css) and "table{border-collapse:collapse;margin:.6em 0;font-size:.9em;max-width:100%}" in css
    assert ".output table,.dothis table{display:block;overflow-x:auto;max-width:100%}" in css
