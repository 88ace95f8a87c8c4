"""sm120lab.runs.answer: the verdict box's vocabulary, rendering and recording."""

from __future__ import annotations

import json

import pytest

from sm120lab.runs import answer
from sm120lab.runs.answer import Answer, Status
from sm120lab.runs.results import RESULTS_ENV


def test_status_is_a_str_enum_with_the_fixed_vocabulary():
    assert [s.value for s in Status] == ["ok", "warn", "bad", "info", "not_run"]
    assert Status.bad == "bad" and json.dumps(Status.ok) == '"ok"'


def test_answer_validates_status_and_fields():
    assert Answer("c", "v", "warn", "w").status is Status.warn
    with pytest.raises(ValueError, match="status: expected one of"):
        Answer("c", "v", "fine", "w")
    with pytest.raises(TypeError, match="value: expected str"):
        Answer("c", 3, Status.ok, "w")


def test_text_and_html_carry_every_field_escaped():
    items = [Answer("120f needs CUDA 13?", "no", Status.ok, "12.9 accepts it"),
             Answer("backend <x>", "not run", Status.not_run, "no GPU & no FlashInfer")]
    text = answer.to_text(items)
    assert "[     OK] 120f needs CUDA 13?: no  (12.9 accepts it)" in text
    assert "[NOT RUN] backend <x>" in text
    html = answer.to_html(items)
    assert "backend &lt;x&gt;" in html and "no GPU &amp; no FlashInfer" in html and "<x>" not in html
    box = answer.AnswerBox(items)
    assert repr(box) == text and box._repr_html_() == html


def test_show_prints_plain_text_outside_a_notebook(capsys):
    answer.show([Answer("a", "b", Status.info, "c")])
    out = capsys.readouterr().out
    assert "[   INFO] a: b  (c)" in out and "<" not in out


def test_record_writes_the_answer_key_and_keeps_other_keys(tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    (tmp_path / "03_x.json").write_text(json.dumps({"verdicts": {"a": "correct"}}))
    items = [Answer("a", "b", Status.bad, "c"), Answer("d", "e", "ok")]
    got = answer.record(items, "03_x")
    data = json.loads((tmp_path / "03_x.json").read_text())
    assert data["answer"] == got == [{"claim": "a", "value": "b", "status": "bad", "why": "c"},
                                     {"claim": "d", "value": "e", "status": "ok", "why": ""}]
    assert data["verdicts"] == {"a": "correct"}
    assert answer.from_records(data["answer"]) == items


def test_record_needs_a_notebook_name(monkeypatch):
    monkeypatch.delenv(answer.NOTEBOOK_ENV, raising=False)
    with pytest.raises(ValueError, match="notebook: expected"):
        answer.record([Answer("a", "b", Status.ok)])
    with pytest.raises(TypeError, match="items: expected Answer"):
        answer.record([{"claim": "a"}], "01_x")


def test_status_of_verdict():
    assert [answer.status_of_verdict(v) for v in ("correct", "degraded", "garbage", "error", "skipped", "x")] == [
        Status.ok, Status.warn, Status.bad, Status.bad, Status.not_run, Status.info]
