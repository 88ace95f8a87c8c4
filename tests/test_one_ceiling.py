"""One ceiling per setup (issue 31, item 3): every decode ceiling notebook 04, ``sm120lab roofline``
and ``sm120lab recommend`` show for one setup is on the guide's basis (the checkpoint's own FP4/16-bit
split, with all-reduce latency), or carries the label of the basis it is on.

A *setup* is (GPU, model, TP, PP, users, context, routing, bandwidth). Each shown ceiling is collected
as ``(setup, basis label, tok/s)``; two numbers of one setup that differ must carry two different,
non-empty labels, and two numbers with one label must be equal.
"""

from __future__ import annotations

import json
import re

import pytest

from sm120lab import recommend
from sm120lab.paths import repo_root
from sm120lab.recommend.facts import GUIDE_BASIS, guide_basis
from sm120lab.roofline import get_model, lesson, load_gpus
from sm120lab.roofline.published import load_published

CONTEXT, ROUTING = 2048, "uniform"
SEED = ("rtx-pro-6000", "qwen3.5-397b-a17b", 2, 2)
REL = 1e-6


def disagreements(records: list[tuple[tuple, str, float]]) -> list[str]:
    """The pairs of ``records`` (setup, label, value) that break the rule: one setup, values that differ
    and no two different non-empty labels; or one label, two values."""
    bad = []
    by_setup: dict[tuple, list[tuple[str, float]]] = {}
    for setup, label, value in records:
        by_setup.setdefault(setup, []).append((label, float(value)))
    for setup, vals in by_setup.items():
        for i, (la, a) in enumerate(vals):
            for lb, b in vals[i + 1:]:
                same = abs(a - b) <= REL * max(abs(a), abs(b))
                if la == lb and not same:
                    bad.append(f"{setup}: {a:.4g} and {b:.4g} both labelled {la!r}")
                elif not same and (not la or not lb):
                    bad.append(f"{setup}: {a:.4g} ({la!r}) and {b:.4g} ({lb!r}) disagree without a label")
    return bad


def test_the_check_fails_on_an_unlabelled_disagreement():
    s = (*SEED, 1, CONTEXT, ROUTING, "datasheet")
    assert disagreements([(s, GUIDE_BASIS, 136.3), (s, "'linear-quantized' plan, bandwidth only", 186.8)]) == []
    assert disagreements([(s, GUIDE_BASIS, 136.3), (s, "", 186.8)])            # the 186.8 has no label
    assert disagreements([(s, GUIDE_BASIS, 136.3), (s, GUIDE_BASIS, 186.8)])   # two numbers, one label
    assert disagreements([(s, "", 136.3), (s, "", 136.3)]) == []               # agreeing numbers need none


def _setup(gpu, model, tp, pp, users, *, routing=ROUTING, bandwidth="datasheet"):
    return (gpu, getattr(model, "name", model), int(tp), int(pp), int(users), CONTEXT, routing, bandwidth)


@pytest.fixture(scope="module")
def shown():
    """Every ceiling notebook 04 shows with its default parameters (the calls its source makes), the
    guide's, and ``sm120lab roofline``'s for the seed setup."""
    cfg = get_model("qwen3.5-397b-a17b")
    basis = guide_basis()
    gpus = load_gpus()
    names = ["rtx-pro-6000", "rtx-5090", "dgx-spark", "h200", "b200"]
    batches = [1, 2, 4, 8, 16, 32, 64]
    rec: list[tuple[tuple, str, float]] = []

    guide = recommend.answer("rtx-pro-6000")
    gs = guide.setup
    rec.append((_setup("rtx-pro-6000", gs.model, gs.tp, gs.pp, gs.users), GUIDE_BASIS, guide.ceiling.per_user_tok_s))
    rec.append((_setup("rtx-pro-6000", gs.model, gs.tp, gs.pp, gs.users),
                "the same without all-reduce latency", guide.ceiling.without_latency.per_user_tok_s))

    tab = lesson.ceiling_table(cfg, basis, gpus, names, tp=2, pp=2, batches=batches, context=CONTEXT)
    for _, r in tab[tab["B"].notna()].iterrows():
        rec.append((_setup(r["gpu"], cfg, 2, 2, r["B"]), r["basis"], r["per_user_tok_s"]))
    for _, r in lesson.seed_ceiling(cfg, basis, gpus, context=CONTEXT).iterrows():
        rec.append((_setup(r["gpu"], cfg, 2, 2, r["B"]), r["basis"], r["per_user_tok_s"]))
    meas = lesson.ceiling_table(cfg, basis, gpus, ["h200"], tp=2, pp=2, batches=batches, context=CONTEXT,
                                bandwidth="measured")
    for _, r in meas.iterrows():
        rec.append((_setup("h200", cfg, 2, 2, r["B"], bandwidth="measured"), r["basis"], r["per_user_tok_s"]))

    pub = lesson.published_vs_ceiling(load_published(), gpus, basis, context=CONTEXT)
    others = lesson.other_basis_labels()
    for _, r in pub[pub["ceiling"].notna()].iterrows():
        s = _setup(r["gpu"], r["model"], r["tp"], r["pp"], r["concurrency"])
        rec.append((s, r["basis"], r["ceiling"]))
        for plan, label in others.items():
            rec.append((s, label, r[f"ceiling_{plan}"]))

    cs = lesson.concurrency_grid(batches)
    panels, _ = lesson.ceiling_curves(pub, gpus, basis, context=CONTEXT, routing=ROUTING, batches=cs)
    for gpu, m, tp, pp, grp, curve, label in panels:
        rec += [(_setup(gpu, m, tp, pp, b), label, c.per_user_tok_s) for b, c in zip(cs, curve)]
        rec += [(_setup(gpu, m, tp, pp, r["concurrency"]), label, r["ceiling_here"]) for _, r in grp.iterrows()]

    skew = lesson.zipf_skew_table(cfg, gpus["rtx-pro-6000"], basis, batches=batches, context=CONTEXT, samples=2000)
    label = basis.label_for(gpus["rtx-pro-6000"], 4)
    for _, r in skew.iterrows():
        rec.append((_setup("rtx-pro-6000", cfg, 2, 2, r["B"], routing=f"zipf s={r['zipf_s']}"), label,
                    r["per_user_tok_s"]))

    _, eff = lesson.recorded_kernel_efficiency(cfg, gpus["h200"])
    for T, p in lesson.guide_prediction(guide, gpus["rtx-pro-6000"], eff).items():
        rec.append((_setup("rtx-pro-6000", cfg, gs.tp, gs.pp, T), GUIDE_BASIS, p["ceiling_tok_s"]))
    return rec, pub, guide


def test_every_ceiling_of_one_setup_agrees_or_is_labelled(shown):
    rec, _, guide = shown
    assert len(rec) > 120
    assert disagreements(rec) == []
    seed1 = _setup(*SEED, 1)
    on_guide = {v for s, label, v in rec if s == seed1 and label == GUIDE_BASIS}
    assert len(on_guide) == 1 or max(on_guide) - min(on_guide) <= REL * max(on_guide)
    assert next(iter(on_guide)) == pytest.approx(guide.ceiling.per_user_tok_s, rel=REL)
    # the seed setup shows more than one basis, and every other one is labelled as what it is
    labels = {label for s, label, _ in rec if s == seed1}
    assert GUIDE_BASIS in labels and "'linear-quantized' plan, bandwidth only" in labels


def _roofline(capsys, *argv) -> tuple[str, float]:
    from sm120lab.cli import main

    assert main(["roofline", *argv]) == 0
    out = capsys.readouterr().out
    label = re.search(r"^basis: (.*?)(?: \([\d.]+ us per all-reduce and pipeline hop\))?$", out, re.M).group(1)
    row = next(ln.split() for ln in out.splitlines() if ln.split()[:1] == ["1"])
    return label, float(row[1])


def test_the_roofline_command_states_the_guide_ceiling_and_labels_the_others(capsys, shown):
    rec, _, guide = shown
    label, value = _roofline(capsys)
    assert label == GUIDE_BASIS and value == pytest.approx(guide.ceiling.per_user_tok_s, abs=0.05)
    rec = rec + [(_setup(*SEED, 1), label, round(guide.ceiling.per_user_tok_s, 1))]
    for plan in ("linear-quantized", "experts-only"):
        label, value = _roofline(capsys, "--plan", plan)
        assert label == lesson.other_basis_labels()[plan]
        rec.append((_setup(*SEED, 1), label, value))
    rounded = [(s, lab, round(v, 1)) for s, lab, v in rec if s == _setup(*SEED, 1)]
    assert disagreements(rounded) == []


def _outputs(nb: dict) -> list[str]:
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            t = out.get("text") or out.get("data", {}).get("text/plain") or ""
            texts.append("".join(t) if isinstance(t, list) else t)
    return texts


def test_the_committed_notebook_names_the_basis_of_every_other_ceiling(shown):
    """In the committed ``notebooks/04_throughput.ipynb``, a ceiling of the seed setup on another basis,
    or Marlin's share of it, only appears with that basis's label (before it in the same output, or right
    after it); the guide's
    ceiling of the seed setup is the one the headline states."""
    _, pub, guide = shown
    nb = json.loads((repo_root() / "notebooks" / "04_throughput.ipynb").read_text())
    texts = _outputs(nb)
    assert any(f"{guide.ceiling.per_user_tok_s:.0f} tok/s" in t for t in texts[:2])
    seed = lesson.seed_rows(pub)
    for plan, label in lesson.other_basis_labels().items():
        ceil1 = lesson.seed_value(seed, "Marlin", 1, f"ceiling_{plan}")
        share = lesson.seed_value(seed, "Marlin", 1, f"pct_{plan}")
        shapes = {f"{ceil1:.1f}", f"{ceil1:.0f} tok/s", f"{share:.1f}", f"= {share:.0f}%"}
        for t in texts:
            for shape in shapes:
                for m in re.finditer(rf"(?<![\d.]){re.escape(shape)}(?![\d])", t):
                    # before it in the same output, or right after it ("187 tok/s on the <label>")
                    assert label in " ".join(t[:m.end() + len(label) + 12].split()), (
                        f"{shape} ({label}) shown without its label:\n{t[max(0, m.start() - 300):m.end() + 50]}")


def _midpoints_unnamed(text: str, mids: list[str]) -> list[str]:
    """Where ``text`` shows one of ``mids`` neither as "(midpoint X)" nor in a table with a midpoint column."""
    bad = []
    for mid in mids:
        for m in re.finditer(rf"(?<![\d.]){re.escape(mid)}(?![\d])", text):
            before = " ".join(text[:m.start()].split())
            header = any("midpoint" in ln and "reported" in ln for ln in text[:m.start()].splitlines())
            if not (before.endswith("(midpoint") or header):
                bad.append(text[max(0, m.start() - 80):m.end() + 20])
    return bad


def test_a_computed_midpoint_is_named_so(shown):
    """The seed reports ranges (Marlin 46-49, 120a 14.6-14.9, Hybrid 14.8-14.9); their midpoints (47.5,
    14.75, 14.85) are the workbook's arithmetic, shown as "46-49 (midpoint 47.5)" or in a table's
    midpoint column, never as a published figure."""
    _, pub, guide = shown
    seed = lesson.seed_rows(pub)
    ranged = seed[seed["tok_s_low"] != seed["tok_s_high"]].dropna(subset=["tok_s"])
    mids = sorted({f"{v:g}" for v in ranged["tok_s"]})
    assert {"47.5", "14.75", "14.85"} <= set(mids)
    nb = json.loads((repo_root() / "notebooks" / "04_throughput.ipynb").read_text())
    for t in _outputs(nb):
        assert _midpoints_unnamed(t, mids) == []
    page = guide.block.to_markdown() + "\n\n" + recommend.to_markdown(guide.items)
    assert _midpoints_unnamed(page, mids) == []
    assert _midpoints_unnamed("Marlin 47.5 = 35%", mids)  # the form issue 31 found is caught
