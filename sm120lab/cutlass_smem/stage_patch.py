"""The stage-count patch for FlashInfer's SM120 grouped GEMM, read from its spec file.

The patch itself is data: ``sm120lab/patches/specs/flashinfer_sm120_stage_count.yaml`` (the
format the patch kit applies; see that engine for apply/revert on an installed package). This
module only reads the spec and applies its exact-text edits to a text in memory, so the
measurement can compile FlashInfer's sources with and without it (an anchor must occur exactly
once, as the engine requires).
"""

from __future__ import annotations

from pathlib import Path

import yaml

SPEC_PATH = Path(__file__).resolve().parent.parent / "patches" / "specs" / "flashinfer_sm120_stage_count.yaml"


def load_spec(path: str | Path = SPEC_PATH) -> dict:
    """The parsed spec (package, versions, patches[...])."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"spec path: {path} does not exist")
    spec = yaml.safe_load(path.read_text())
    if not isinstance(spec, dict) or not isinstance(spec.get("patches"), list):
        raise ValueError(f"spec {path}: expected a mapping with a 'patches' list")
    return spec


def version_matches(spec: dict, version: str) -> bool:
    """Whether ``version`` is inside the spec's PEP 440 ``versions`` specifier set."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(version) in SpecifierSet(spec["versions"])


def apply_to_text(text: str, patch: dict, *, where: str = "text") -> str:
    """Replace the patch's anchor (which must occur exactly once) by its replacement."""
    anchor, replacement = patch["anchor"], patch["replacement"]
    n = text.count(anchor)
    if n != 1:
        raise ValueError(f"patch {patch.get('id')}: anchor occurs {n} times in {where}, expected exactly 1")
    return text.replace(anchor, replacement, 1)


def apply_to_tree(site_root: Path, dest_root: Path, spec: dict | None = None) -> list[str]:
    """Apply every patch of ``spec``, in order, to the copies under ``dest_root``.

    ``dest_root`` mirrors the site-packages layout (``flashinfer/data/...``) and must hold
    pristine copies of the files below ``site_root`` (checked). Returns the ids applied.
    """
    spec = spec or load_spec()
    texts: dict[Path, str] = {}
    applied = []
    for patch in spec["patches"]:
        target = Path(dest_root) / patch["file"]
        if target not in texts:
            texts[target] = target.read_text()
            if texts[target] != (Path(site_root) / patch["file"]).read_text():
                raise RuntimeError(f"{target} is not a pristine copy of {patch['file']}")
        texts[target] = apply_to_text(texts[target], patch, where=patch["file"])
        applied.append(patch["id"])
    for target, text in texts.items():
        target.write_text(text)
    return applied
