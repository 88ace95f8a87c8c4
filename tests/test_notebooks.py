"""The committed notebooks are built from their jupytext percent sources and nothing else.

``notebooks/src/NN_name.py`` is the truth; ``make notebook NB=NN`` writes ``notebooks/NN_name.ipynb``.
These tests fail when the two drift apart (a cell edited in Jupyter and not in the source, or a
source edited without rebuilding), and when a notebook has no, or more than one, ``parameters``
cell (papermill injects ``sm120lab run`` parameters after that cell).
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))


def cell_signature(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    """(cell type, source without trailing blank lines, tags) of every cell."""
    return [(c.cell_type, c.source.rstrip("\n"), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def test_every_source_has_a_notebook_and_back():
    built = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert SOURCES, "no notebook sources found in notebooks/src/"
    assert [p.stem for p in SOURCES] == built, (
        "notebooks/src/*.py and notebooks/*.ipynb must pair one to one (make notebooks)")


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_committed_notebook_matches_its_source(source: Path):
    notebook = ROOT / "notebooks" / f"{source.stem}.ipynb"
    assert notebook.is_file(), f"{notebook.name} missing: run `make notebook NB={source.stem[:2]}`"
    want = cell_signature(jupytext.read(source))
    have = cell_signature(jupytext.read(notebook))
    for i, (w, h) in enumerate(zip(want, have)):
        assert w == h, (f"{notebook.name} cell {i} drifted from {source.name}: "
                        f"rebuild with `make notebook NB={source.stem[:2]}`\n source: {w}\n notebook: {h}")
    assert len(want) == len(have), (f"{notebook.name} has {len(have)} cells, {source.name} {len(want)}: "
                                    f"rebuild with `make notebook NB={source.stem[:2]}`")


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_exactly_one_parameters_cell(source: Path):
    nb = jupytext.read(source)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", ())]
    assert len(tagged) == 1, f"{source.name}: expected exactly one cell tagged 'parameters', found {tagged}"
    assert nb.cells[tagged[0]].cell_type == "code", f"{source.name}: the parameters cell must be code"


def test_drift_is_detected(tmp_path: Path):
    """The comparison itself catches an edited cell and a lost tag."""
    source = SOURCES[0]
    nb = jupytext.read(source)
    edited = jupytext.read(source)
    edited.cells[-1].source += "\nprint('edited in Jupyter')"
    assert cell_signature(edited) != cell_signature(nb)
    untagged = jupytext.read(source)
    for c in untagged.cells:
        c.metadata.pop("tags", None)
    assert cell_signature(untagged) != cell_signature(nb)
