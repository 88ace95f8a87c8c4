"""Patch specs and the patch engine.

The engine tests (apply, revert, refusals, power cuts, kills) run offline on a site built from the
specs themselves (:func:`_spec_site`: every anchor of FlashInfer 0.6.5's specs once, in its file,
between filler lines), so `make test` downloads nothing. The tests marked ``network`` check the
specs against the real FlashInfer / vLLM wheels (PyPI, downloaded once into ~/.cache/sm120lab/wheels
or $SM120LAB_CACHE; only the files the specs name are extracted): anchors unique in the real files,
evidence lines quoted exactly. Every test that writes works on a copy in tmp_path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.utils import canonicalize_name

from sm120lab.cli import main as cli_main
from sm120lab.patches import engine
from sm120lab.patches import textmatch as tm
from sm120lab.patches.site import locate
from sm120lab.patches.spec import SpecError, all_spec_files, load_specs
from sm120lab.patches.wheels import download_wheel, evidence_quotes, fetch_for_audit, spec_members, wheel_subset

FI_OLD, FI_NEW, VLLM = "0.6.5", "0.7.4", "0.17.0"
CUTE = "flashinfer/data/cutlass/python/CuTeDSL/"
# the seed report's "Files Patched (Complete List)" (https://github.com/flashinfer-ai/flashinfer/issues/2723)
SEED_FILES_FI = [
    "flashinfer/compilation_context.py", "flashinfer/jit/fused_moe.py",
    "flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu",
    CUTE + "cutlass/cute/nvgpu/cpasync/copy.py", CUTE + "cutlass/cute/nvgpu/tcgen05/mma.py",
    CUTE + "cutlass/cute/nvgpu/tcgen05/copy.py", CUTE + "cutlass/cute/arch/mbar.py",
    CUTE + "cutlass/cute/arch/elect.py", CUTE + "base_dsl/runtime/cuda.py",
]
SEED_FILES_VLLM = [
    "vllm/model_executor/layers/fused_moe/experts/trtllm_nvfp4_moe.py",
    "vllm/model_executor/layers/fused_moe/flashinfer_trtllm_moe.py",
    "vllm/model_executor/layers/fused_moe/flashinfer_cutedsl_moe.py",
]


@pytest.fixture(scope="module")
def fi_old_wheel() -> Path:
    return fetch_for_audit("flashinfer", FI_OLD)


def _spec_site(root: Path, package: str, version: str) -> Path:
    """A site-packages root for ``package==version`` made from its specs alone: each patched file
    holds every anchor of its patches once, between unique filler lines, and the dist-info METADATA
    names the version. As in the real 0.6.5 wheel (``test_status_065_every_seed_edit_has_a_unique_anchor``)
    every patch is applicable; the engine's behaviour does not depend on the rest of the file."""
    specs = load_specs(package, version)
    files: dict[str, str] = {}
    for p in specs.patches:
        if p.file and p.anchor:
            text = files.get(p.file, "") + f"# filler {len(files.get(p.file, ''))} of {p.file}\n"
            files[p.file] = text + (p.anchor + "\n" if p.anchor not in text else "")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "# end\n")
    dist = specs.package.replace("-", "_")
    (root / f"{dist}-{version}.dist-info").mkdir(parents=True)
    (root / f"{dist}-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {specs.package}\nVersion: {version}\n")
    states = engine.status(locate(specs.package, specs.import_name, root), specs)
    assert {s.status for s in states if not s.patch.documented_only} == {tm.APPLICABLE}
    return root


@pytest.fixture(scope="module")
def fi_old(tmp_path_factory) -> Path:
    """FlashInfer 0.6.5 as its specs describe it (:func:`_spec_site`), offline."""
    return _spec_site(tmp_path_factory.mktemp("fi065"), "flashinfer", FI_OLD)


@pytest.fixture(scope="module")
def fi_new() -> Path:
    return fetch_for_audit("flashinfer", FI_NEW)


def _copy_site(src: Path, dst: Path) -> Path:
    """The files the specs touch and the dist-info METADATA (the shared extraction folder may
    hold the whole wheel when another test extracted it)."""
    name, version = next(src.glob("*.dist-info")).name[:-len(".dist-info")].split("-")
    for rel in [*spec_members(canonicalize_name(name), version), *(p.relative_to(src).as_posix() for p in src.glob("*.dist-info/METADATA"))]:
        if (src / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, dst / rel)
    return dst


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _own_ids(specs):
    """Patches from this kit's spec files (not the separately written stage-count spec)."""
    return [p for p in specs.patches if p.source.startswith(("flashinfer_0_6", "vllm_"))]


# --- spec files ---------------------------------------------------------------------------

def test_every_spec_file_parses_and_ids_are_unique_per_version():
    files = all_spec_files()
    assert files, "no spec files packaged"
    for f in files:
        ids = [p.id for p in f["patches"]]
        assert len(ids) == len(set(ids)), f["name"]
    for version in (FI_OLD, FI_NEW, "0.6.7", "0.6.6"):
        s = load_specs("flashinfer", version)
        assert len({p.id for p in s.patches}) == len(s.patches)


@pytest.mark.parametrize("package,version", [("flashinfer", "0.5.3"), ("flashinfer", "0.8.0"), ("vllm", "0.16.0")])
def test_version_without_spec_is_refused_with_the_known_ranges(package, version):
    with pytest.raises(SpecError, match="no patch spec") as exc:
        load_specs(package, version)
    assert "specs exist for" in str(exc.value)


def test_seed_report_files_are_all_covered():
    fi = {p.file for p in load_specs("flashinfer", FI_OLD).patches}
    assert set(SEED_FILES_FI) <= fi
    vl = {p.file for p in load_specs("vllm", VLLM).patches}
    assert set(SEED_FILES_VLLM) <= vl
    doc = [p for p in load_specs("vllm", VLLM).patches if p.documented_only and p.seed_ref]
    assert {"CMakeLists" in p.seed_ref or "nvfp4_utils" in p.seed_ref for p in doc} == {True}


# --- status on the real wheels matches the audit --------------------------------------------

@pytest.mark.network
def test_status_065_every_seed_edit_has_a_unique_anchor(fi_old_wheel):
    fi_old = fi_old_wheel
    specs = load_specs("flashinfer", FI_OLD)
    states = engine.status(locate("flashinfer-python", "flashinfer", fi_old), specs)
    own = [s for s in states if s.patch in _own_ids(specs)]
    assert own and all(s.status == tm.APPLICABLE for s in own), [(s.patch.id, s.status) for s in own]
    # one CuTeDSL entry per "sm_100a" list entry in each file of the real wheel (seed: 4/2/3/8/1)
    for rel in SEED_FILES_FI[3:8]:
        n_wheel = sum(1 for line in (fi_old / rel).read_text().splitlines() if line.strip() == '"sm_100a",')
        n_spec = sum(1 for p in specs.patches if p.file == rel)
        assert n_wheel == n_spec > 0, rel
    assert sum(1 for p in specs.patches if p.file and p.file.startswith(CUTE + "cutlass/")) == 18
    by_cls = {s.patch.id: s.patch.classification for s in own}
    assert {by_cls[i] for i in ("fi-trtllm-launcher-major-ge-10", "fi-trtllm-launcher-props-ge-10",
                                "fi-jit-trtllm-gen-moe-major-12")} == {"harmful"}
    assert not any(p.classification == "needed" for p in _own_ids(specs))


@pytest.mark.network
def test_status_074_upstreamed_anchors_gone_and_stale_copy_absent(fi_new):
    specs = load_specs("flashinfer", FI_NEW)
    states = engine.status(locate("flashinfer-python", "flashinfer", fi_new), specs)
    whl = zipfile.ZipFile(download_wheel("flashinfer-python", FI_NEW))
    names = set(whl.namelist())
    for s in states:
        if s.patch not in _own_ids(specs):
            continue
        if s.patch.classification == "upstreamed":
            assert s.status == tm.ANCHOR_MISSING, s.patch.id
        if s.patch.file.startswith(CUTE):
            assert (s.status == tm.FILE_MISSING) == (s.patch.file not in names), s.patch.id
        if s.patch.id.startswith("fi-jit-moe-sm10"):
            assert s.status == tm.APPLICABLE, s.patch.id


@pytest.mark.network
def test_stale_cutedsl_copy_is_not_imported_by_flashinfer_065():
    """The no-op claim for the 18 CuTeDSL edits: no flashinfer module puts the copy on sys.path."""
    with zipfile.ZipFile(download_wheel("flashinfer-python", FI_OLD)) as zf:
        py = [n for n in zf.namelist() if n.startswith("flashinfer/") and n.endswith(".py")
              and not n.startswith("flashinfer/data/")]
        offenders = []
        for n in py:
            for line in zf.read(n).decode("utf-8", "replace").splitlines():
                code = line.split("#", 1)[0]
                if "CuTeDSL" in code and ("sys.path" in code or "data" in code):
                    offenders.append((n, line))
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Requires-Dist: nvidia-cutlass-dsl" in zf.read(meta).decode()
    assert len(py) > 50 and offenders == []


@pytest.mark.network
def test_evidence_lines_quote_the_real_files():
    """Every ``[version] path:line: text`` line in every spec is the wheel's actual line."""
    wanted: dict[tuple[str, str], set[str]] = {}
    quotes = []
    for f in all_spec_files():
        if not f["name"].startswith(("flashinfer_0_6", "vllm_")):
            continue  # this kit's spec files (the stage-count spec has its own proof)
        dist = f["package"]
        for item in f["patches"] + f["settings"]:
            for ver, path, line, text in evidence_quotes(item.evidence):
                wanted.setdefault((dist, ver), set()).add(path)
                quotes.append((dist, ver, path, line, text, item.id))
    assert len(quotes) > 50
    roots = {key: wheel_subset(key[0], key[1], sorted(paths)) for key, paths in wanted.items()}
    for dist, ver, path, line, text, pid in quotes:
        lines = (roots[(dist, ver)] / path).read_text().splitlines()
        assert lines[line - 1].rstrip().strip() == text.strip(), (pid, path, line)


# --- apply / revert -------------------------------------------------------------------------

def test_apply_then_revert_is_byte_identical_and_apply_is_idempotent(fi_old, tmp_path, seed):
    rng = random.Random(seed)
    site = _copy_site(fi_old, tmp_path / "site")
    before = _hashes(site)
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    ids = [p.id for p in rng.sample(_own_ids(specs), k=rng.randint(3, 10))]
    out = engine.apply(tree, specs, ids)
    assert out.changed and {i for c in out.changes for i in c.patch_ids} == set(ids)
    states = {s.patch.id: s.status for s in engine.status(tree, specs)}
    assert all(states[i] == tm.APPLIED for i in ids)
    after = _hashes(site)
    changed = {k for k in before if before[k] != after.get(k)}
    assert changed == {c.rel for c in out.changes}
    manifest = engine.read_manifest(tree)
    for c in out.changes:
        assert manifest["files"][c.rel]["new_sha256"] == after[c.rel]
        assert manifest["files"][c.rel]["original_sha256"] == before[c.rel]
    again = engine.apply(tree, specs, ids)  # second apply: nothing written
    assert not again.changed and sorted(again.skipped) == sorted(ids)
    assert {k: v for k, v in _hashes(site).items() if not k.startswith(engine.STATE_DIR)} == \
           {k: v for k, v in after.items() if not k.startswith(engine.STATE_DIR)}
    engine.revert(tree, specs)
    assert _hashes(site) == before  # byte for byte, and backups/manifest gone


def test_incremental_apply_keeps_the_first_backup(fi_old, tmp_path):
    site = _copy_site(fi_old, tmp_path / "site")
    before = _hashes(site)
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    engine.apply(tree, specs, ["fi-cutedsl-mbar-sm120a-1"])
    engine.apply(tree, specs, ["fi-cutedsl-mbar-sm120a-5", "fi-jit-moe-sm100-major-12"])
    m = engine.read_manifest(tree)["files"][CUTE + "cutlass/cute/arch/mbar.py"]
    assert m["patches"] == ["fi-cutedsl-mbar-sm120a-1", "fi-cutedsl-mbar-sm120a-5"]
    engine.revert(tree, specs)
    assert _hashes(site) == before


def test_tampered_file_is_refused(fi_old, tmp_path, seed):
    rng = random.Random(seed)
    site = _copy_site(fi_old, tmp_path / "site")
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    out = engine.apply(tree, specs, ["fi-trtllm-launcher-major-ge-10", "fi-compilation-context-arch-suffix"])
    victim = site / rng.choice(out.changes).rel
    data = bytearray(victim.read_bytes())
    i = rng.randrange(len(data))
    data[i] = (data[i] + rng.randint(1, 255)) % 256
    victim.write_bytes(bytes(data))
    snapshot = _hashes(site)
    for action in (lambda: engine.revert(tree, specs), lambda: engine.apply(tree, specs, ["fi-jit-moe-sm100-major-12"])):
        with pytest.raises(engine.PatchError, match="changed since sm120lab patched") as exc:
            action()
        assert "force-reinstall" in str(exc.value)
        assert _hashes(site) == snapshot  # a refusal writes nothing


def test_missing_and_ambiguous_anchor_are_refused(fi_old, tmp_path):
    site = _copy_site(fi_old, tmp_path / "site")
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    p = specs.patch("fi-jit-moe-sm100-major-12")
    target = site / p.file
    original = target.read_bytes()
    target.write_bytes(original + b"\n# " + p.anchor.encode() + b"\n")
    with pytest.raises(engine.PatchError, match="anchor-ambiguous"):
        engine.apply(tree, specs, [p.id])
    target.write_bytes(original.replace(p.anchor.encode(), b"supported_major_versions=[9]"))
    with pytest.raises(engine.PatchError, match="anchor-missing"):
        engine.apply(tree, specs, [p.id])
    assert not (site / engine.STATE_DIR).exists()


def test_revert_without_manifest_writes_nothing_and_names_hand_edits(fi_old, tmp_path):
    site = _copy_site(fi_old, tmp_path / "site")
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    p = specs.patch("fi-trtllm-launcher-props-ge-10")
    f = site / p.file
    f.write_bytes(f.read_bytes().replace(p.anchor.encode(), p.replacement.encode()))  # like the seed's hand edit
    snapshot = _hashes(site)
    out = engine.revert(tree, specs)
    assert not out.changed and _hashes(site) == snapshot  # nothing of ours to restore: nothing written
    assert len(out.notes) == 1 and p.id in out.notes[0] and "force-reinstall" in out.notes[0]


_CRASHER = textwrap.dedent("""
    import os, signal, sys
    from sm120lab.patches import engine
    from sm120lab.patches.site import locate
    from sm120lab.patches.spec import load_specs
    site, kill_at, ids = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    real, n = os.replace, [0]
    def replace(src, dst):
        # die after the temp file of the kill_at-th patched file is fully written, before the rename
        if "/.sm120lab-patches/" not in str(dst):
            n[0] += 1
            if n[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst)
    os.replace = replace
    tree = locate("flashinfer-python", "flashinfer", site)
    engine.apply(tree, load_specs("flashinfer", tree.version), ids)
""")


@pytest.mark.parametrize("trial", range(2))
def test_power_cut_leaves_old_or_new_never_half(fi_old, tmp_path, trial, seed):
    rng = random.Random(seed)
    site = _copy_site(fi_old, tmp_path / "site")
    before = _hashes(site)
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    files = {}
    for p in _own_ids(specs):
        files.setdefault(p.file, p.id)
    ids = rng.sample(sorted(files.values()), k=4)
    planned, _ = engine.plan_apply(tree, specs, ids)
    old = {c.rel: c.old for c in planned}
    new = {c.rel: c.new for c in planned}
    kill_at = rng.randint(1, len(planned))
    proc = subprocess.run([sys.executable, "-c", _CRASHER, str(site), str(kill_at), *ids],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    states = []
    for rel in old:
        data = (site / rel).read_bytes()
        assert data in (old[rel], new[rel]), f"{rel} is neither the original nor the patched file"
        states.append(data == new[rel])
    assert sum(states) == kill_at - 1  # files before the kill are patched, the rest original
    engine.revert(tree, specs)  # the manifest was written before any file: revert restores all
    for rel in old:
        assert (site / rel).read_bytes() == old[rel]
    assert _hashes(site) == before  # and the killed write's temp file is swept


# --- CLI --------------------------------------------------------------------------------------

def test_cli_status_apply_dry_run_and_refusals(fi_old, tmp_path, capsys):
    site = _copy_site(fi_old, tmp_path / "site")
    before = _hashes(site)
    assert cli_main(["patch", "status", "--site", str(site), "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "fi-trtllm-launcher-major-ge-10" in out and "harmful" in out
    assert cli_main(["patch", "apply", "--site", str(site), "--dry-run", "--only", "fi-jit-moe-sm100-major-12"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^-\s*supported_major_versions=\[10, 11\]$", out, re.M), out
    assert re.search(r"^\+\s*supported_major_versions=\[10, 11, 12\]$", out, re.M), out
    assert _hashes(site) == before
    assert cli_main(["patch", "apply", "--site", str(site), "--only", "no-such-patch"]) == 2  # a bad argument
    assert cli_main(["patch", "status", "--site", str(site / "flashinfer")]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert cli_main(["patch", "status", "--package", "nope", "--site", str(site)]) == 2


# --- vLLM 0.17.0 (433 MB wheel; only the named files are extracted) ---------------------------

@pytest.mark.slow
@pytest.mark.network
def test_vllm_0170_capability_patches_are_harmful_and_flashinfer_cutlass_already_accepts_sm120(tmp_path):
    root = fetch_for_audit("vllm", VLLM)
    specs = load_specs("vllm", VLLM)
    tree = locate("vllm", "vllm", root)
    states = {s.patch.id: s for s in engine.status(tree, specs)}
    for rel in SEED_FILES_VLLM:
        (s,) = [s for s in states.values() if s.patch.file == rel]
        assert s.status == tm.APPLICABLE and s.patch.classification == "harmful"
    fc = (root / "vllm/model_executor/layers/fused_moe/flashinfer_cutlass_moe.py").read_text()
    assert "is_device_capability_family(120)" in fc
    site = _copy_site(root, tmp_path / "v")
    before = _hashes(site)
    t2 = locate("vllm", "vllm", site)
    engine.apply(t2, specs, [s.patch.id for s in states.values() if s.patch.file in SEED_FILES_VLLM])
    engine.revert(t2, specs)
    assert _hashes(site) == before


def test_clear_jit_cache_keeps_cubins(fi_old, tmp_path, monkeypatch, capsys):
    site = _copy_site(fi_old, tmp_path / "site")
    base = tmp_path / "ws"
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(base))
    cache = base / ".cache" / "flashinfer"
    (cache / FI_OLD / "120a" / "cached_ops").mkdir(parents=True)
    (cache / FI_OLD / "120a" / "cached_ops" / "m.so").write_bytes(random.Random(0).randbytes(64))
    (cache / "cubins").mkdir()
    (cache / "cubins" / "k.cubin").write_bytes(random.Random(0).randbytes(64))
    assert cli_main(["patch", "apply", "--site", str(site), "--only", "fi-jit-moe-sm100-major-12", "--clear-jit-cache"]) == 0
    assert not (cache / FI_OLD).exists() and (cache / "cubins" / "k.cubin").is_file()
    assert cli_main(["patch", "revert", "--site", str(site)]) == 0
    assert "clear it" in capsys.readouterr().out  # without the flag: tell the user


def _needed_spec(tmp_path: Path, fi_old: Path, rng: random.Random) -> tuple[Path, str, str]:
    """A user spec with one `needed` patch whose anchor is a random unique line of the file, outside
    every anchor of the packaged specs (so the packaged patches stay applicable)."""
    rel = "flashinfer/jit/fused_moe.py"
    lines = (fi_old / rel).read_text().splitlines(keepends=True)
    text = "".join(lines)
    anchors = [p.anchor for p in load_specs("flashinfer", FI_OLD).patches if p.file == rel and p.anchor]
    unique = [ln for ln in lines if len(ln.strip()) > 12 and text.count(ln) == 1
              and not any(ln.strip() in a or a.strip() in ln for a in anchors)]
    anchor = rng.choice(unique)
    pid = f"user-needed-{rng.randrange(10**6)}"
    d = tmp_path / "specs"
    d.mkdir()
    doc = {"package": "flashinfer-python", "import_name": "flashinfer", "versions": "==0.6.5",
           "patches": [{"id": pid, "file": rel, "anchor": anchor, "replacement": anchor + "# sm120lab test\n",
                        "classification": "needed", "purpose": "test", "evidence": "test", "default_apply": True}]}
    import yaml
    (d / "user_test.yaml").write_text(yaml.safe_dump(doc))
    return d, pid, rel


def test_default_apply_takes_exactly_the_needed_default_patches(fi_old, tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    d, pid, rel = _needed_spec(tmp_path, fi_old, rng)
    monkeypatch.setenv("SM120LAB_PATCH_SPECS", str(d))
    site = _copy_site(fi_old, tmp_path / "site")
    before = _hashes(site)
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    assert pid in {p.id for p in specs.patches} and "user_test.yaml" in specs.sources
    expected = {p.id for p in specs.patches if p.classification == "needed" and p.default_apply}
    out = engine.apply(tree, specs)  # no --only
    assert {i for c in out.changes for i in c.patch_ids} == expected
    assert {c.rel for c in out.changes} >= {rel}
    states = {s.patch.id: s.status for s in engine.status(tree, specs)}
    assert all(states[i] == tm.APPLIED for i in expected)
    assert all(states[p.id] == tm.APPLICABLE for p in _own_ids(specs))  # no-op/harmful untouched
    engine.revert(tree, specs)
    assert _hashes(site) == before


_REVERT_CRASHER = textwrap.dedent("""
    import os, signal, sys
    from sm120lab.patches import engine
    from sm120lab.patches.site import locate
    from sm120lab.patches.spec import load_specs
    site, kill_at = sys.argv[1], int(sys.argv[2])
    real, n = os.replace, [0]
    def replace(src, dst):
        n[0] += 1
        if n[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst)
    os.replace = replace
    tree = locate("flashinfer-python", "flashinfer", site)
    engine.revert(tree, load_specs("flashinfer", tree.version))
""")


def test_power_cut_during_revert_then_revert_again(fi_old, tmp_path, seed):
    rng = random.Random(seed)
    site = _copy_site(fi_old, tmp_path / "site")
    before = _hashes(site)
    tree = locate("flashinfer-python", "flashinfer", site)
    specs = load_specs("flashinfer", tree.version)
    files = {}
    for p in _own_ids(specs):
        files.setdefault(p.file, p.id)
    out = engine.apply(tree, specs, rng.sample(sorted(files.values()), k=3))
    new = {c.rel: c.new for c in out.changes}
    kill_at = rng.randint(1, len(new))
    proc = subprocess.run([sys.executable, "-c", _REVERT_CRASHER, str(site), str(kill_at)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    for rel, data in new.items():
        cur = (site / rel).read_bytes()
        assert hashlib.sha256(cur).hexdigest() in (before[rel], hashlib.sha256(data).hexdigest())
    engine.revert(tree, specs)
    assert _hashes(site) == before


# --- audit_available: installed, else wheelhouse, else PyPI ------------------------------------

@pytest.mark.network
def test_audit_available_reads_a_local_wheelhouse_without_downloading(tmp_path, monkeypatch):
    from sm120lab.patches import Origin, audit_available

    house = tmp_path / "house"
    house.mkdir()
    shutil.copy(download_wheel("flashinfer-python", FI_OLD), house)
    (house / "not-a-wheel-name.whl").write_bytes(b"junk")  # ignored: not a valid wheel file name
    monkeypatch.setenv("SM120LAB_CACHE", str(tmp_path / "cache"))  # empty cache: nothing downloaded
    monkeypatch.delenv("SM120LAB_WHEELHOUSE", raising=False)
    result = audit_available(wheelhouse=house, download=False)
    (a,) = result.audits
    assert (a.package, a.version, a.origin) == ("flashinfer-python", FI_OLD, Origin.WHEELHOUSE)
    assert len(a.rows) == len(load_specs("flashinfer", FI_OLD).patches) > 20
    assert not (tmp_path / "cache" / "wheels" / "dl").exists()
    assert set(result.not_audited) == {"vllm"} and "\n" not in result.not_audited["vllm"]
    # the same through the environment variable
    monkeypatch.setenv("SM120LAB_WHEELHOUSE", str(house))
    assert [x.key for x in audit_available(["flashinfer"], download=False).audits] == [f"flashinfer-python=={FI_OLD}"]


def test_audit_available_gives_one_line_reasons(tmp_path, monkeypatch):
    from sm120lab.patches import audit_available

    monkeypatch.setenv("SM120LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SM120LAB_WHEELHOUSE", raising=False)
    off = audit_available(["flashinfer"], wheelhouse=tmp_path / "none", download=False)
    assert off.audits == [] and "downloads are off" in off.not_audited["flashinfer-python"]
    # a version inside a spec's range that PyPI does not have: pip's error, in one line
    bad = audit_available(["flashinfer"], fallback={"flashinfer": ("0.6.5.post999",)})
    (why,) = bad.not_audited.values()
    assert "pip download flashinfer-python==0.6.5.post999 failed" in why and "\n" not in why
    assert all("\n" not in line for line in bad.lines())


# --- nothing lost, nothing half-done (issue: revert/apply with bad manifests, failed writes, kills) ----

TWO_FILES = ["fi-jit-moe-sm100-major-12", "fi-trtllm-launcher-major-ge-10"]
THREE_FILES = TWO_FILES + ["fi-compilation-context-arch-suffix"]


def _fresh(fi_old, where: Path):
    site = _copy_site(fi_old, where)
    tree = locate("flashinfer-python", "flashinfer", site)
    return site, tree, load_specs("flashinfer", tree.version)


def _site_files(site: Path) -> dict[str, str]:
    return {k: v for k, v in _hashes(site).items() if not k.startswith(engine.STATE_DIR)}


def test_revert_with_an_emptied_manifest_keeps_the_backups_and_refuses(fi_old, tmp_path):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    out = engine.apply(tree, specs, TWO_FILES)
    mpath = engine.manifest_path(tree)
    manifest = json.loads(mpath.read_text())
    manifest["files"] = {}
    mpath.write_text(json.dumps(manifest))
    snapshot = _hashes(site)
    with pytest.raises(engine.PatchError, match="refusing to delete the backups"):
        engine.revert(tree, specs)
    assert _hashes(site) == snapshot  # still patched, every backup still there
    for c in out.changes:
        assert (engine.state_dir(tree) / "backup" / c.rel).read_bytes() == c.old


@pytest.mark.parametrize("bad", [
    [], "manifest", 3, None,
    {"package": "flashinfer-python", "version": "0.6.5"},
    {"package": "flashinfer-python", "version": "0.6.5", "files": []},
    {"package": "vllm", "version": "0.6.5", "files": {}},
    {"package": "flashinfer-python", "version": "0.6.5", "files": {}, "surprise": 1},
])
def test_manifest_of_the_wrong_shape_is_refused_in_one_line(fi_old, tmp_path, bad):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    engine.apply(tree, specs, TWO_FILES)
    engine.manifest_path(tree).write_text(json.dumps(bad))
    snapshot = _hashes(site)
    for action in (lambda: engine.revert(tree, specs), lambda: engine.apply(tree, specs, ["fi-jit-moe-sm103-major-12"])):
        with pytest.raises(engine.PatchError, match="not a valid sm120lab manifest") as exc:
            action()
        assert "force-reinstall" in str(exc.value) and "\n" not in str(exc.value)
    assert _hashes(site) == snapshot


def test_binary_manifest_is_refused(fi_old, tmp_path):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    engine.apply(tree, specs, TWO_FILES)
    engine.manifest_path(tree).write_bytes(b"\xff\xfe\x00binary\x89PNG")
    with pytest.raises(engine.PatchError, match="not a readable JSON manifest"):
        engine.revert(tree, specs)


@pytest.mark.parametrize("rel", ["../x", "/sm120lab-outside-abs", "flashinfer/../../x", "flashinfer\\..\\x",
                                 ".sm120lab-patches/flashinfer-python/manifest.json", "", "./flashinfer/__init__.py"])
def test_manifest_path_outside_the_site_is_refused(fi_old, tmp_path, rel):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    engine.apply(tree, specs, TWO_FILES)
    mpath = engine.manifest_path(tree)
    manifest = json.loads(mpath.read_text())
    data = b"outside\n"
    manifest["files"][rel] = {"original_sha256": hashlib.sha256(data).hexdigest(),
                              "new_sha256": hashlib.sha256(b"x").hexdigest(), "backup": f"backup/{rel}", "patches": []}
    mpath.write_text(json.dumps(manifest))
    (engine.state_dir(tree) / "backup" / "x").write_bytes(data)
    outside = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(engine.PatchError, match="not a relative path inside"):
        engine.revert(tree, specs)
    assert sorted(p.name for p in tmp_path.iterdir()) == outside and not Path("/sm120lab-outside-abs").exists()


def _fail_on(monkeypatch, victim: str):
    """Make the atomic write of ``victim`` fail like a read-only file would."""
    real = engine.write_bytes_atomic

    def write(path, data, **kw):
        if str(path).endswith(victim) and engine.STATE_DIR not in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, data, **kw)
    monkeypatch.setattr(engine, "write_bytes_atomic", write)


@pytest.mark.parametrize("earlier", [False, True])
def test_apply_failing_on_a_later_file_restores_every_file(fi_old, tmp_path, monkeypatch, earlier):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    if earlier:  # an earlier apply's manifest and backups must come back unchanged
        engine.apply(tree, specs, ["fi-jit-moe-sm103-major-12"])
    before = _hashes(site)
    planned, _ = engine.plan_apply(tree, specs, THREE_FILES)
    assert len(planned) == 3
    _fail_on(monkeypatch, planned[1].rel)
    with pytest.raises(engine.PatchError, match="every file was restored"):
        engine.apply(tree, specs, THREE_FILES)
    assert _hashes(site) == before  # files, manifest and backups exactly as before


def test_read_only_target_is_refused_before_anything_is_written(fi_old, tmp_path, monkeypatch):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    before = _hashes(site)
    planned, _ = engine.plan_apply(tree, specs, THREE_FILES)
    victim = site / planned[2].rel
    if os.geteuid() == 0:  # root ignores permission bits: make the check see what a user would
        real = os.access
        monkeypatch.setattr(engine.os, "access", lambda p, m: False if Path(p) == victim else real(p, m))
    else:
        victim.chmod(0o444)
        victim.parent.chmod(0o555)
    try:
        with pytest.raises(engine.PatchError, match="no write permission"):
            engine.apply(tree, specs, THREE_FILES)
    finally:
        victim.parent.chmod(0o755)
        victim.chmod(0o644)
    assert _hashes(site) == before and not (site / engine.STATE_DIR).exists()


def _cli_killed_at(site: Path, step: int, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{engine.KILL_ENV: str(step)})
    return subprocess.run([sys.executable, "-m", "sm120lab", "patch", *args, "--site", str(site)],
                          capture_output=True, text=True, timeout=120, env=env)


def test_kill_at_every_step_of_apply_and_revert_leaves_old_or_new_and_revert_recovers(fi_old, tmp_path):
    site, tree, specs = _fresh(fi_old, tmp_path / "pristine")
    before = _hashes(site)
    planned, _ = engine.plan_apply(tree, specs, THREE_FILES)
    old = {c.rel: c.old for c in planned}
    new = {c.rel: c.new for c in planned}
    n_apply = 3 + 1 + 3 + 1  # backups, manifest, files, final manifest
    n_revert = 3 + 1  # files, backup removal
    for action, steps in (("apply", n_apply), ("revert", n_revert)):
        for step in range(1, steps + 2):
            run_site = tmp_path / f"{action}-{step}"
            shutil.copytree(site, run_site)
            if action == "revert":
                engine.apply(locate("flashinfer-python", "flashinfer", run_site), specs, THREE_FILES)
            args = ["apply", "--only", *THREE_FILES] if action == "apply" else ["revert"]
            proc = _cli_killed_at(run_site, step, *args)
            killed = proc.returncode == -9
            assert killed == (step <= steps), (action, step, proc.returncode, proc.stderr[-500:])
            for rel in old:
                assert (run_site / rel).read_bytes() in (old[rel], new[rel]), (action, step, rel)
            engine.revert(locate("flashinfer-python", "flashinfer", run_site), specs)  # recovers everything
            assert _hashes(run_site) == before, (action, step)
            shutil.rmtree(run_site)


_RELS = st.sampled_from([
    "flashinfer/jit/fused_moe.py", "flashinfer/compilation_context.py", "flashinfer/__init__.py",
    "../x", "../../etc/passwd", "/sm120lab-abs", "flashinfer/../../x", "flashinfer/../x", "a\\b", "",
    ".sm120lab-patches/flashinfer-python/manifest.json", "flashinfer//x", "./x", "nonexistent/file.py",
])
_HEXES = st.one_of(st.text("0123456789abcdef", min_size=64, max_size=64), st.text(max_size=5), st.integers())
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=8)
_ENTRY = st.one_of(_JSON, st.fixed_dictionaries(
    {"original_sha256": _HEXES, "new_sha256": _HEXES, "backup": st.one_of(st.just("backup/"), st.text(max_size=12)),
     "patches": st.one_of(st.lists(st.text(max_size=6), max_size=2), _JSON)}))
_MANIFEST = st.one_of(_JSON, st.fixed_dictionaries(
    {"package": st.sampled_from(["flashinfer-python", "vllm", 3]), "version": st.just("0.6.5"),
     "files": st.one_of(st.dictionaries(_RELS, _ENTRY, max_size=4), _JSON)},
    optional={"tool": _JSON, "complete": st.booleans(), "extra": _JSON}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest=_MANIFEST, keep_real=st.booleans(), action=st.sampled_from(["revert", "apply", "status"]))
def test_random_manifests_never_traceback_escape_or_lose_a_backup(fi_old, tmp_path_factory, manifest, keep_real, action):
    """Whatever the manifest holds: a PatchError or success, no write outside the site, and no
    backup deleted while its target differs from it."""
    base = tmp_path_factory.mktemp("prop")
    site, tree, specs = _fresh(fi_old, base / "site")
    engine.apply(tree, specs, TWO_FILES)
    mpath = engine.manifest_path(tree)
    real = json.loads(mpath.read_text())
    if keep_real and isinstance(manifest, dict) and isinstance(manifest.get("files"), dict):
        manifest["files"].update(real["files"])  # valid entries beside the random ones
    mpath.write_text(json.dumps(manifest))
    backups = {p: p.read_bytes() for p in (engine.state_dir(tree) / "backup").rglob("*") if p.is_file()}
    outside = sorted(str(p) for p in base.rglob("*") if site not in p.parents and p != site)
    try:
        if action == "revert":
            engine.revert(tree, specs)
        elif action == "apply":
            engine.apply(tree, specs, ["fi-jit-moe-sm103-major-12"])
        else:
            assert cli_main(["patch", "status", "--site", str(site)]) == 0
    except engine.PatchError as exc:
        assert str(exc)
    assert sorted(str(p) for p in base.rglob("*") if site not in p.parents and p != site) == outside
    assert not Path("/sm120lab-abs").exists()
    for backup, data in backups.items():
        rel = backup.relative_to(engine.state_dir(tree) / "backup")
        assert backup.is_file() or (site / rel).read_bytes() == data, f"backup of {rel} lost while the file differs"
    shutil.rmtree(base)


def test_cli_unwritable_json_is_one_line(fi_old, tmp_path, capsys):
    site = _copy_site(fi_old, tmp_path / "site")
    (tmp_path / "a-file").write_text("a file, not a folder")
    for bad in (tmp_path / "a-file" / "a.json", tmp_path):  # under a file / a directory
        assert cli_main(["patch", "status", "--site", str(site), "--json", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("--json: cannot write") and "\n" not in err


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\xff binary", b"package: [unclosed\n  - x: {", b"- a list\n"])
def test_cli_bad_user_spec_file_is_one_line(tmp_path, monkeypatch, capsys, content):
    d = tmp_path / "specs"
    d.mkdir()
    (d / "mine.yaml").write_bytes(content)
    monkeypatch.setenv("SM120LAB_PATCH_SPECS", str(d))
    assert cli_main(["patch", "status", "--site", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "mine.yaml" in err and len(err.splitlines()) == 1 and "Traceback" not in err


_KILL_MID_WRITE = textwrap.dedent("""
    import os, signal, sys
    from sm120lab.cli import main
    real, n = os.replace, [0]
    def replace(src, dst):  # die with the temp file of the n-th atomic write complete, before its rename
        n[0] += 1
        if n[0] == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst)
    os.replace = replace
    sys.exit(main(sys.argv[2:]))
""")


def test_kill_inside_every_atomic_write_of_apply_and_revert(fi_old, tmp_path):
    """Every os.replace of apply (backups, manifests, files) and revert: killed with its temp file
    written; every file stays old or new and a later revert restores the whole site."""
    site, tree, specs = _fresh(fi_old, tmp_path / "pristine")
    before = _hashes(site)
    planned, _ = engine.plan_apply(tree, specs, THREE_FILES)
    old = {c.rel: c.old for c in planned}
    new = {c.rel: c.new for c in planned}
    for action, n_writes in (("apply", 3 + 1 + 3 + 1), ("revert", 3)):
        for n in range(1, n_writes + 2):
            run_site = tmp_path / f"{action}-{n}"
            shutil.copytree(site, run_site)
            if action == "revert":
                engine.apply(locate("flashinfer-python", "flashinfer", run_site), specs, THREE_FILES)
            args = ["apply", "--only", *THREE_FILES] if action == "apply" else ["revert"]
            proc = subprocess.run([sys.executable, "-c", _KILL_MID_WRITE, str(n), "patch", *args, "--site", str(run_site)],
                                  capture_output=True, text=True, timeout=120)
            assert (proc.returncode == -9) == (n <= n_writes), (action, n, proc.returncode, proc.stderr[-400:])
            for rel in old:
                assert (run_site / rel).read_bytes() in (old[rel], new[rel]), (action, n, rel)
            engine.revert(locate("flashinfer-python", "flashinfer", run_site), specs)
            assert _hashes(run_site) == before, (action, n)
            shutil.rmtree(run_site)


def test_one_extraction_cache_from_a_wheelhouse_offline(tmp_path, monkeypatch):
    """A synthetic wheel in a wheelhouse: found by parse_wheel_filename (other names ignored),
    members and prefixes extracted into one folder, a '../' member never written, absent members
    remembered, and a second request served without opening any wheel."""
    from sm120lab.toolchains import pypi_wheels as pw

    monkeypatch.setenv("SM120LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(pw.WHEELHOUSE_ENV, raising=False)
    house = tmp_path / "house"
    house.mkdir()
    members = {"demo_pkg/__init__.py": b"x = 1\n", "demo_pkg/sub/a.h": b"// a\n",
               "demo_pkg-1.0.dist-info/METADATA": b"Name: demo-pkg\nVersion: 1.0\n", "../evil.py": b"boom"}
    with zipfile.ZipFile(house / "demo_pkg-1.0-py3-none-any.whl", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    (house / "demo_pkg-2.0-py3-none-any.whl.part").write_bytes(b"")
    (house / "demo-pkg.whl").write_bytes(b"")  # not a valid wheel file name
    assert pw.find_wheel("Demo_Pkg", "1.0", wheelhouse=house).name == "demo_pkg-1.0-py3-none-any.whl"
    assert pw.find_wheel("demo-pkg", "2.0", wheelhouse=house) is None
    root = pw.extract("demo-pkg", "1.0", members=["demo_pkg/__init__.py", "demo_pkg/missing.py"], wheelhouse=house)
    assert (root / "demo_pkg/__init__.py").read_bytes() == b"x = 1\n" and not (root / "demo_pkg/sub/a.h").exists()
    assert (root / "demo_pkg-1.0.dist-info/METADATA").is_file()
    assert not (tmp_path / "cache" / "wheels" / "evil.py").exists() and not list(tmp_path.rglob("evil.py"))
    assert pw.fetch_wheel("demo-pkg", "1.0", only=("demo_pkg/sub/",), wheelhouse=house) == root
    assert (root / "demo_pkg/sub/a.h").read_bytes() == b"// a\n"
    monkeypatch.setattr(pw, "download_wheel", lambda *a, **k: pytest.fail("served from the cache"))
    assert pw.extract("demo-pkg", "1.0", members=["demo_pkg/missing.py", "demo_pkg/sub/a.h"]) == root
    for bad in (("demo-pkg", "not a version"), ("", "1.0")):
        with pytest.raises(ValueError, match="version|dist"):
            pw.extract(*bad)
    with pytest.raises(ValueError, match="members"):
        pw.extract("demo-pkg", "1.0", members=["../evil.py"])


def test_revert_failing_on_a_later_file_leaves_everything_patched(fi_old, tmp_path, monkeypatch):
    site, tree, specs = _fresh(fi_old, tmp_path / "site")
    out = engine.apply(tree, specs, THREE_FILES)
    snapshot = _hashes(site)
    _fail_on(monkeypatch, out.changes[2].rel)
    with pytest.raises(engine.PatchError, match="every file is as it was before this revert"):
        engine.revert(tree, specs)
    assert _hashes(site) == snapshot  # files still patched, manifest and backups kept
    monkeypatch.undo()
    engine.revert(tree, specs)
    assert all((site / c.rel).read_bytes() == c.old for c in out.changes)


@pytest.mark.network
def test_cli_status_of_a_wheel_file(tmp_path, monkeypatch, capsys):
    whl = download_wheel("flashinfer-python", FI_NEW)
    monkeypatch.setenv("SM120LAB_CACHE", str(tmp_path / "cache"))  # extracted from the file, nothing downloaded
    house = tmp_path / "house"
    house.mkdir()
    shutil.copy(whl, house)
    assert cli_main(["patch", "status", "--wheel", str(house / whl.name)]) == 0
    out = capsys.readouterr().out
    assert f"flashinfer-python {FI_NEW}" in out and "upstreamed" in out
    assert not (tmp_path / "cache" / "wheels" / "dl").exists()
    (house / "flashinfer_python-0.6.6-py3-none-any.whl").write_bytes(b"not a zip")
    for bad in (house / "flashinfer_python-0.6.6-py3-none-any.whl", house / "nope.whl", house / "flashinfer_python-9.9-py3-none-any.whl"):
        assert cli_main(["patch", "status", "--wheel", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("--wheel:") and len(err.splitlines()) == 1, err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_apply_is_all_or_nothing_for_any_patch_set_and_failing_file(fi_old, tmp_path_factory, data):
    base = tmp_path_factory.mktemp("aon")
    site, tree, specs = _fresh(fi_old, base / "site")
    by_file = {}
    for p in _own_ids(specs):
        by_file.setdefault(p.file, p.id)
    ids = data.draw(st.lists(st.sampled_from(sorted(by_file.values())), min_size=2, max_size=6, unique=True))
    planned, _ = engine.plan_apply(tree, specs, ids)
    before = _hashes(site)
    victim = data.draw(st.sampled_from([c.rel for c in planned]))
    real = engine.write_bytes_atomic

    def write(path, payload, **kw):
        if str(path).endswith(victim) and engine.STATE_DIR not in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, payload, **kw)
    engine.write_bytes_atomic = write
    try:
        with pytest.raises(engine.PatchError, match="every file was restored"):
            engine.apply(tree, specs, ids)
    finally:
        engine.write_bytes_atomic = real
    assert _hashes(site) == before
    engine.apply(tree, specs, ids)
    assert all((site / c.rel).read_bytes() == c.new for c in planned)
    engine.revert(tree, specs)
    assert _hashes(site) == before
    shutil.rmtree(base)


def test_cli_status_without_the_package_falls_back_to_a_cached_wheel_or_names_every_way(tmp_path, monkeypatch, capsys):
    """Not installed: `patch status` audits the newest spec-quoted version this machine holds (here a
    wheel in $SM120LAB_WHEELHOUSE); with none and no PyPI it exits 2 in one line naming every way in."""
    from sm120lab.patches.wheels import audited_versions, fallback_version
    from sm120lab.toolchains.pypi_wheels import WHEELHOUSE_ENV

    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here: status audits it")
    monkeypatch.setenv("SM120LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip download fails at once: nothing leaves the machine
    monkeypatch.delenv(WHEELHOUSE_ENV, raising=False)
    assert audited_versions("flashinfer") == [FI_OLD, FI_NEW]
    assert fallback_version("flashinfer") == (FI_NEW, False)
    assert cli_main(["patch", "status"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: flashinfer-python is not installed here")
    assert all(way in err[-1] for way in ("--site DIR", "--wheel FILE.whl", f"${WHEELHOUSE_ENV}", "pip install"))
    house = tmp_path / "house"
    house.mkdir()
    rel = "flashinfer/jit/fused_moe.py"
    with zipfile.ZipFile(house / f"flashinfer_python-{FI_OLD}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"flashinfer_python-{FI_OLD}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {FI_OLD}\n")
        zf.writestr(rel, load_specs("flashinfer", FI_OLD).patch("fi-jit-moe-sm100-major-12").anchor + "\n")
    monkeypatch.setenv(WHEELHOUSE_ENV, str(house))
    assert fallback_version("flashinfer") == (FI_OLD, True)
    assert cli_main(["patch", "status"]) == 0
    cap = capsys.readouterr()
    assert f"auditing its cached {FI_OLD} wheel" in cap.err and f"flashinfer-python {FI_OLD} at" in cap.out
    assert f"({FI_OLD} wheel, not installed)" in cap.out and "fi-jit-moe-sm100-major-12" in cap.out
