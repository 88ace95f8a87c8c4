"""Hostile inputs, third round (issue 32, item 5): each ends in a one-line error naming the argument
(or file) and what was expected, or a correct result; never a traceback, a hang, a silent success or
an overwritten file. Everything here runs on the CPU with fixed inputs."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import nbformat
import pytest

from sm120lab.cli import main


def cli(*argv: str) -> tuple[int, str]:
    """Run the CLI as the console script does; (exit status, everything printed).

    A ``SystemExit`` carrying a message is what Python would print and exit with: the status is the
    one the process would end with (``sys.exit("text")`` ends with 1).
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            status = main(list(argv))
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                status = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                status = 1
    return status, buf.getvalue()


def one_line_error(status: int, out: str, *needles: str, code: int = 2) -> None:
    assert status == code, (status, out)
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    for n in needles:
        assert n in out, (n, out)


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture
def books(tmp_path):
    d = tmp_path / "nbs"
    d.mkdir()
    flag = tmp_path / "ran"
    for name in ("01_a", "02_b", "03_c"):
        _notebook(d / f"{name}.ipynb", f"open({str(flag)!r}, 'a').write('{name} ')")
    return d, flag


# --- empty means nothing, never everything ---------------------------------------------------------

@pytest.mark.parametrize("only", [[""], [" "], ["01", ""], [".ipynb"]])
def test_run_only_empty_name_runs_nothing(books, tmp_path, only):
    nbs, flag = books
    out = tmp_path / "run"
    one_line_error(*cli("run", "--no-progress", "--notebooks-dir", str(nbs), "--out", str(out), "--only", *only),
                   "--only", "expected notebook names")
    assert not flag.exists() and not out.exists()


@pytest.mark.parametrize("flag,value", [("--routing", ""), ("--routing", ","), ("--routing", " , "),
                                        ("--preset", ""), ("--preset", ",")])
def test_check_sweep_with_an_empty_list_is_refused_not_a_clean_sweep(tmp_path, flag, value):
    out = tmp_path / "sweep.json"
    args = {"--routing": "uniform", "--preset": "tiny", flag: value}
    status, text = cli("check", "--sweep", "2", "--device", "cpu", "--preset", args["--preset"],
                       "--routing", args["--routing"], "--json", str(out))
    one_line_error(status, text, flag, "expected")
    assert "false-alarm sweep" not in text and not out.exists()


def test_false_alarm_sweep_refuses_empty_presets_or_families():
    from sm120lab.moe.sweep import false_alarm_sweep

    for presets, families in (([], ["uniform"]), (["tiny"], [])):
        with pytest.raises(ValueError, match="at least one"):
            false_alarm_sweep(presets, families, 1, 0, "cpu")


# --- one exit-code contract: bad arguments 2, a failed judgement 1 ------------------------------------

def _run_folder(d: Path, verdict: str) -> Path:
    (d / "results").mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"schema_version": 2, "notebooks": [
        {"name": "01_a", "status": "ok", "output": "01_a.ipynb"}]}))
    (d / "environment.json").write_text(json.dumps({"host": "h", "gpu": {"available": False}}))
    (d / "results" / "01_a.json").write_text(json.dumps({"verdicts": {"be": verdict}}))
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a")]), d / "01_a.ipynb")
    return d


@pytest.mark.parametrize("argv, needle", [
    (["report", "{tmp}"], "RUN:"),
    (["archive", "{tmp}"], "RUN:"),
    (["roofline", "--tp", "0"], "--tp: expected"),
    (["recommend", "--users", "-1"], "--users: expected"),
    (["recommend", "--gpu", "h100"], "--gpu: expected"),
    (["upstream", "record", "vllm", "not-a-version"], "version: expected"),
    (["upstream", "show", "vllm", "9.9.9"], "no recorded facts"),
    (["toolchains", "install", "99.9"], "versions:"),
    (["dev", "kernel-aot", "--jobs", "0"], "--jobs: expected"),
    (["check", "--sweep", "0", "--device", "cpu"], "--sweep: expected"),
    (["run", "--params", "{tmp}/missing.yaml"], "--params"),
])
def test_bad_arguments_exit_2_in_every_command(tmp_path, argv, needle):
    one_line_error(*cli(*[a.format(tmp=tmp_path) for a in argv]), needle)


def test_a_message_exit_is_status_2_for_the_real_process(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "sm120lab", "report", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert proc.stdout == "" and proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("RUN: ") and "Traceback" not in proc.stderr


def test_a_failed_judgement_is_status_1_not_2(tmp_path):
    good, bad = _run_folder(tmp_path / "A", "correct"), _run_folder(tmp_path / "B", "garbage")
    assert cli("compare", str(good), str(good))[0] == 0
    status, out = cli("compare", str(good), str(bad))
    assert status == 1 and "Traceback" not in out


# --- validation at the edges ----------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("k", 0), ("H", 0), ("E", 0), ("E", 8.0), ("I", -16), ("k", True),
                                          ("default_tokens", 0), ("E", "8")])
def test_moe_config_refuses_a_shape_no_layer_has(field, value):
    from sm120lab.moe.problem import MoEConfig

    kw = {"E": 8, "k": 2, "H": 128, "I": 64, field: value}
    with pytest.raises(ValueError) as exc:
        MoEConfig("x", **kw)
    msg = str(exc.value)
    assert msg.startswith(f"MoEConfig.{field}: expected a positive integer") and repr(value) in msg and "\n" not in msg


def test_moe_config_refuses_top_k_above_experts_and_keeps_numpy_ints_as_ints():
    import numpy as np

    from sm120lab.moe.problem import MoEConfig

    with pytest.raises(ValueError, match=r"^MoEConfig.k: expected top-k <= E=2 experts, got 3$"):
        MoEConfig("x", E=2, k=3, H=128, I=64)
    cfg = MoEConfig("x", E=np.int64(8), k=2, H=128, I=64)
    assert type(cfg.E) is int and cfg.E == 8


GOOD_ENTRY = {"E": 8, "N": 64, "K": 128, "top_k": 2, "T": 4, "path": "mma", "w13": "m16n64k128w4s4",
              "w2": "m16n64k128w4s4"}


@pytest.mark.parametrize("change, needle", [
    ({"T": 0}, "T: expected a positive integer, got 0"),
    ({"T": -4}, "T: expected a positive integer, got -4"),
    ({"T": "4"}, "T: expected a positive integer, got '4'"),
    ({"E": 0}, "E: expected a positive integer"),
    ({"N": None}, "N: expected a positive integer, got None"),
    ({"top_k": 9}, "top_k: expected <= E=8"),
    ({"path": "nope"}, "path: expected one of frag, decode, mma, got 'nope'"),
    ({"w13": "nope"}, "w13: unknown mma tile 'nope'"),
    ({"w2": ["x"]}, "w2: expected a mma tile name"),
    ({"w2": "f2w4"}, "w2: unknown mma tile 'f2w4'"),
    # tiles that exist but do not pair: refused at load, not at plan time
    ({"w2": "m32n64k128w4s3"}, "w13/w2: MMA tiles must share BLOCK_M, got m16n64k128w4s4 and m32n64k128w4s3"),
    ({"path": "frag", "w13": "f1w8", "w2": "f1w8"}, "w13/w2: the w13 fragment tile needs an even TILES"),
    ({"path": "frag", "w13": "f2w4", "w2": "f2w4b"}, "w13/w2: f2w4b: SHARE_B is not an option of the unsorted w2"),
    ({"path": "frag", "w13": "f2w2oc2b", "w2": "f2w2o"}, "w13/w2: fragment tiles must agree on SORTED and the block"),
    ({"path": "decode", "w13": "d8x64w2s1", "w2": "d16x64w4s1o"}, "w13/w2: decode tiles must agree on SORTED"),
])
def test_tile_table_entries_are_checked_one_by_one_at_load(tmp_path, change, needle):
    from sm120lab.kernels.plan import TileTable

    f = tmp_path / "cpu.json"
    entries = [dict(GOOD_ENTRY), {**GOOD_ENTRY, "T": 16, **change}]
    f.write_text(json.dumps({"schema": 1, "device": "cpu", "entries": entries}))
    with pytest.raises(ValueError) as exc:
        TileTable.load(f)
    msg = str(exc.value)
    assert msg.startswith(f"tile table {f}: entries[1]: ") and needle in msg and "\n" not in msg


def test_tile_table_entry_that_is_not_an_object_and_the_repositorys_tables_load(tmp_path):
    from sm120lab.kernels.plan import TILES_DIR, TileTable

    f = tmp_path / "t.json"
    f.write_text(json.dumps({"schema": 1, "entries": [GOOD_ENTRY, 7]}))
    with pytest.raises(ValueError, match=r"entries\[1\]: expected an object"):
        TileTable.load(f)
    tables = sorted(TILES_DIR.glob("*.json"))
    assert tables and all(TileTable.load(t).entries for t in tables)


def test_a_bad_table_under_sm120lab_tiles_dir_is_named_at_plan_time(tmp_path, monkeypatch):
    from sm120lab.kernels.plan import MoEShape, plan_moe, reload_tables

    (tmp_path / "cpu.json").write_text(json.dumps({"schema": 1, "entries": [{**GOOD_ENTRY, "T": 0}]}))
    monkeypatch.setenv("SM120LAB_TILES_DIR", str(tmp_path))
    reload_tables()
    try:
        with pytest.raises(ValueError) as exc:
            plan_moe(MoEShape(E=8, N=64, K=128, top_k=2), 4, device="cpu")
        assert str(exc.value).startswith(f"tile table {tmp_path / 'cpu.json'}: entries[0]: T: expected")
        (tmp_path / "cpu.json").write_text(json.dumps({"schema": 1, "entries": [GOOD_ENTRY]}))
        reload_tables()
        plan = plan_moe(MoEShape(E=8, N=64, K=128, top_k=2), 4, device="cpu")
        assert plan.source.startswith("table") and plan.w13.name == "m16n64k128w4s4"
    finally:
        monkeypatch.delenv("SM120LAB_TILES_DIR")
        reload_tables()


def test_bench_tiles_with_a_bad_entry_is_one_line_before_anything_runs(tmp_path):
    f = tmp_path / "tiles.json"
    f.write_text(json.dumps({"schema": 1, "entries": [{**GOOD_ENTRY, "path": "warp"}]}))
    before = f.read_bytes()
    one_line_error(*cli("bench", "moe", "--model", "tiny", "--tiles", str(f)), "--tiles: tile table", "entries[0]",
                   "path: expected")
    assert f.read_bytes() == before


@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 32), (3, 5, 0, 16)])
def test_empty_input_to_swizzled_quantization_round_trips(shape):
    import torch

    from sm120lab.nvfp4 import dequantize_nvfp4, quantize_nvfp4

    q = quantize_nvfp4(torch.zeros(shape), torch.tensor(1.0), scale_layout="swizzled")
    assert tuple(dequantize_nvfp4(q).shape) == shape
    lin = q.with_layout("linear")
    assert tuple(lin.scale.shape) == (*shape[:-1], shape[-1] // 16)
    assert tuple(lin.with_layout("swizzled").scale.shape) == tuple(q.scale.shape)


def test_unswizzle_names_its_arguments():
    import torch

    from sm120lab.nvfp4.swizzle import unswizzle_scales_128x4

    with pytest.raises(ValueError, match=r"^unswizzle_scales_128x4: rows=129, cols=1 .*'swizzled'"):
        unswizzle_scales_128x4(torch.zeros(128, 4, dtype=torch.float8_e4m3fn), 129, 1)


@pytest.mark.parametrize("argv", [
    ["check", "--tokens", "2", "--device", "cpu", "--backend", "reference", "--seed", str(2**63)],
    ["check", "--tokens", "2", "--device", "cpu", "--backend", "reference", "--seed", "-1"],
    ["check", "--tokens", "2", "--device", "cpu", "--backend", "reference", "--seed", "99999999999999999999"],
    ["check", "--sweep", "2", "--device", "cpu", "--routing", "uniform", "--seed", str(2**63 - 1)],
    ["bench", "moe", "--model", "tiny", "--seed", "-5"],
    ["dev", "gpu-probes", "--seed", str(2**64)],
])
def test_an_out_of_range_seed_is_named(argv):
    status, out = cli(*argv)
    last = out.strip().splitlines()[-1]  # argparse prints its usage first, then the one error line
    assert status == 2 and "Traceback" not in out and "Overflow" not in out, out
    assert "--seed" in last and "expected" in last and "2**63" in last, out


def test_make_moe_problem_names_an_out_of_range_seed():
    from sm120lab.moe import make_moe_problem

    for seed in (-1, 2**63, 1.5):
        with pytest.raises(ValueError, match=r"^seed must be an int in \[0, 2\*\*63-1\]"):
            make_moe_problem("tiny", tokens=2, seed=seed)
    assert make_moe_problem("tiny", tokens=2, seed=2**63 - 1).seed == 2**63 - 1


@pytest.mark.parametrize("content", ["not json", '{"cells": 3}', "[]", "\x00\x01", '{"nbformat": 4}'])
def test_a_notebook_that_is_not_a_notebook_is_named(books, tmp_path, content):
    nbs, flag = books
    (nbs / "02_b.ipynb").write_text(content)
    out = tmp_path / "run"
    one_line_error(*cli("run", "--no-progress", "--notebooks-dir", str(nbs), "--out", str(out)),
                   str(nbs / "02_b.ipynb"), "expected a Jupyter notebook")
    assert not flag.exists() and not out.exists()


def test_model_and_preset_lookups_are_case_insensitive():
    from sm120lab import recommend
    from sm120lab.moe import make_moe_problem

    upper, lower = recommend.answer("rtx-pro-6000", model="GPT-OSS-120B"), recommend.answer("rtx-pro-6000",
                                                                                          model="gpt-oss-120b")
    assert upper.setup == lower.setup and upper.block.to_markdown() == lower.block.to_markdown()
    status, out = cli("recommend", "--model", "Qwen3-235B-A22B", "--markdown")
    assert status == 0 and "qwen3-235b-a22b" in out
    assert make_moe_problem("TINY", tokens=2, seed=3).config.name == "tiny"
    one_line_error(*cli("recommend", "--model", "llama"), "--model:", "expected one of")


# --- memory safety of the custom op and the kernels ------------------------------------------------------

_IDS_SCRIPT = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from sm120lab.kernels.moe_layer import fused_moe_nvfp4, fused_moe_packed
from sm120lab.kernels.moe_op import register_moe_weights
from sm120lab.kernels.prepack import prepare_moe_weights
from sm120lab.moe import make_moe_problem

p = make_moe_problem("tiny", tokens=6, seed=int(sys.argv[1]), device="cpu")
E = p.config.E
register_moe_weights("hostile-ids", prepare_moe_weights(p.w13, p.w2))
ids = p.topk_ids
cases = {
    "minus-one": ids.clone().index_fill_(0, torch.tensor([2]), -1),
    "E": ids.clone().index_fill_(0, torch.tensor([5]), E),
    "huge": ids.clone().fill_(2**40),
    "bool": ids.bool(),
    "float": ids.float(),
    "int32": ids.int(),
    "int16": ids.short(),
    "uint8": ids.to(torch.uint8),
}
calls = {
    "op": lambda i: torch.ops.sm120lab.moe_nvfp4(p.hidden, i, p.topk_weights, "hostile-ids"),
    "fused_moe_nvfp4": lambda i: fused_moe_nvfp4(p.hidden, i, p.topk_weights, p.w13, p.w2),
    "fused_moe_packed": lambda i: fused_moe_packed(p.hidden, i, p.topk_weights, prepare_moe_weights(p.w13, p.w2)),
}
want = {name: fn(ids) for name, fn in calls.items()}
out = {}
for case, i in cases.items():
    for name, fn in calls.items():
        try:
            out[f"{case}/{name}"] = "equal" if torch.equal(fn(i), want[name]) else "differs"
        except ValueError as exc:
            out[f"{case}/{name}"] = "ValueError: " + str(exc)
print(json.dumps(out))
"""


def test_topk_ids_outside_the_experts_or_bool_are_refused_not_a_crash():
    """An id of -1 or E once gave "double free or corruption" / a segfault on the CPU interpreter; in a
    subprocess, so a regression fails this test instead of killing the suite."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _IDS_SCRIPT, "11"], capture_output=True, text=True, timeout=600,
                          env=env, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for call in ("op", "fused_moe_nvfp4", "fused_moe_packed"):
        for case, needle in (("minus-one", "min -1, max 7; first at [2, 0]: -1"),
                             ("E", "max 8; first at [5, 0]: 8"), ("huge", f"max {2**40}")):
            msg = res[f"{case}/{call}"]
            assert msg.startswith("ValueError: topk_ids: expected expert ids in [0, E=8)") and needle in msg, msg
            assert "\n" not in msg
        for case in ("bool", "float"):
            msg = res[f"{case}/{call}"]
            assert msg.startswith("ValueError: topk_ids must be an integer tensor") and f"torch.{case}" in msg, msg
        for case in ("int32", "int16", "uint8"):  # the ids the kernels do take: the same output as int64
            assert res[f"{case}/{call}"] == "equal", (case, call, res[f"{case}/{call}"])


def test_expert_id_range_check_runs_on_the_host_for_cpu_ids_and_reads_nothing_when_empty():
    import torch

    from sm120lab.kernels.moe_layer import check_expert_ids

    check_expert_ids(torch.zeros(0, 2, dtype=torch.int64), 4)
    check_expert_ids(torch.tensor([[0, 3], [2, 1]]), 4)
    with pytest.raises(ValueError, match=r"^topk_ids: expected expert ids in \[0, E=4\), got 1 outside it "
                                         r"\(min 0, max 4; first at \[1, 0\]: 4\)$"):
        check_expert_ids(torch.tensor([[0, 3], [4, 1]]), 4)


# --- writes that replace what they should write through ---------------------------------------------------

def test_atomic_write_goes_through_a_symlink_and_keeps_the_link(tmp_path):
    import os

    from sm120lab.atomic_io import write_json_atomic, write_text_atomic

    real = tmp_path / "real" / "out.json"
    real.parent.mkdir()
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)
    assert write_json_atomic(chain, {"a": 1}) == chain
    assert chain.is_symlink() and link.is_symlink() and not real.is_symlink()
    assert json.loads(real.read_text()) == {"a": 1} and real.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in real.parent.iterdir()] == ["out.json"]  # no temporary file left beside it
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "made.txt")
    write_text_atomic(dangling, "hi")
    assert dangling.is_symlink() and (tmp_path / "made.txt").read_text() == "hi"


def _special_files(tmp_path: Path) -> dict[str, Path]:
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = {"a FIFO": fifo, "a folder": tmp_path / "folder"}
    out["a folder"].mkdir()
    try:  # a character device node like /dev/full (only root may make one; never the real /dev here)
        os.mknod(tmp_path / "chardev", stat.S_IFCHR | 0o666, os.makedev(1, 7))
        out["a character device"] = tmp_path / "chardev"
    except (PermissionError, OSError):
        pass
    link = tmp_path / "link-to-fifo"
    link.symlink_to(fifo)
    out["a FIFO "] = link
    return out


def test_atomic_write_refuses_what_is_not_a_regular_file(tmp_path):
    import os
    import stat

    from sm120lab.atomic_io import write_text_atomic

    for kind, path in _special_files(tmp_path).items():
        before = os.stat(path).st_mode
        with pytest.raises(OSError) as exc:
            write_text_atomic(path, "x")
        assert exc.value.strerror.startswith(f"expected a regular file, but it is {kind.strip()}")
        assert "refusing to replace it" in exc.value.strerror and "\n" not in exc.value.strerror
        assert os.stat(path).st_mode == before and not stat.S_ISREG(before)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_text_writes_keep_crlf_line_endings(tmp_path):
    from sm120lab.atomic_io import newline_of, write_text_atomic

    crlf, lf = tmp_path / "crlf.md", tmp_path / "lf.md"
    crlf.write_bytes(b"# t\r\nkeep\r\n")
    lf.write_bytes(b"# t\nkeep\n")
    write_text_atomic(crlf, "# t\nkeep\nnew\n")
    write_text_atomic(lf, "# t\nkeep\nnew\n")
    assert crlf.read_bytes() == b"# t\r\nkeep\r\nnew\r\n" and lf.read_bytes() == b"# t\nkeep\nnew\n"
    assert newline_of(crlf) == "\r\n" and newline_of(lf) == "\n" and newline_of(tmp_path / "none") == "\n"
    write_text_atomic(crlf, "a\nb\n", newline=None)
    assert crlf.read_bytes() == b"a\nb\n"


def test_cli_json_targets_write_through_links_and_refuse_special_files(tmp_path):
    real = tmp_path / "reports" / "check.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "check.json"
    link.symlink_to(real)
    status, out = cli("check", "--tokens", "2", "--device", "cpu", "--backend", "reference", "--json", str(link))
    assert status == 0, out
    assert link.is_symlink() and json.loads(real.read_text())["command"].startswith("sm120lab check")
    (tmp_path / "special").mkdir()
    for kind, path in _special_files(tmp_path / "special").items():
        status, out = cli("check", "--tokens", "2", "--device", "cpu", "--backend", "reference", "--json", str(path))
        assert status == 2 and "problem:" not in out, out  # refused before the run, in one line
        one_line_error(status, out, "--json", "expected a" if kind == "a folder" else "refusing to replace it")


def test_doctor_json_writes_through_a_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "doctor.json"
    link.symlink_to(real)
    status, out = cli("doctor", "--measure", "off", "--json", str(link))
    assert status in (0, 1), out  # 1: a measured failure; --measure off measures nothing
    assert link.is_symlink() and json.loads(real.read_text()) != {}


def test_update_readme_through_a_link_keeps_crlf_outside_the_markers(tmp_path):
    real = tmp_path / "docs" / "README.md"
    real.parent.mkdir()
    head, tail = b"# title\r\n\r\nintro line\r\n", b"\r\ntail line\r\n"
    real.write_bytes(head + b"<!-- guide:start -->\r\nSTALE-BLOCK\r\n<!-- guide:end -->" + tail)
    link = tmp_path / "README.md"
    link.symlink_to(real)
    status, out = cli("recommend", "--gpu", "rtx-5090", "--update-readme", str(link))
    assert status == 0, out
    data = real.read_bytes()
    assert link.is_symlink() and data.startswith(head + b"<!-- guide:start -->\r\n") and data.endswith(b"-->" + tail)
    assert b"STALE-BLOCK" not in data and b"\n" not in data.replace(b"\r\n", b"")  # every line ending is CRLF


# --- upstream records and run folders taken on trust ---------------------------------------------------

def _wheel_file(path: Path, meta_name: str, meta_version: str) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{meta_name}-{meta_version}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {meta_name}\nVersion: {meta_version}\n")
    return path


@pytest.fixture
def upstream_copy(tmp_path, monkeypatch):
    """A copy of data/upstream that the store reads instead (so a refused write could only land there)."""
    import shutil

    from sm120lab.paths import data_dir
    from sm120lab.upstream import store

    root = tmp_path / "checkout"
    shutil.copytree(data_dir() / "upstream", root / "data" / "upstream")
    monkeypatch.setattr(store, "data_dir", lambda: root / "data")
    store._cached_index.cache_clear()
    store._cached_record.cache_clear()
    yield root / "data" / "upstream"
    store._cached_index.cache_clear()
    store._cached_record.cache_clear()


@pytest.mark.parametrize("wheel_name, meta", [
    ("vllm-9.9.9-py3-none-any.whl", ("vllm", "9.9.9")),          # another version, consistent in itself
    ("vllm-0.21.0-py3-none-any.whl", ("flashinfer-python", "0.6.5")),  # the name says one thing, METADATA another
    ("flashinfer_python-0.21.0-py3-none-any.whl", ("flashinfer-python", "0.21.0")),  # another dist
])
def test_record_refuses_a_wheel_that_is_not_the_dist_version_named(upstream_copy, tmp_path, wheel_name, meta):
    before = {p.name: p.read_bytes() for p in upstream_copy.iterdir() if p.is_file()}
    wheel = _wheel_file(tmp_path / wheel_name, *meta)
    one_line_error(*cli("upstream", "record", "vllm", "0.21.0", "--wheel", str(wheel), "--force"), "--wheel:",
                   wheel_name)
    assert {p.name: p.read_bytes() for p in upstream_copy.iterdir() if p.is_file()} == before


def test_record_refuses_a_wheel_that_is_not_a_zip(upstream_copy, tmp_path):
    bad = tmp_path / "vllm-0.21.0-py3-none-any.whl"
    bad.write_text("not a zip")
    one_line_error(*cli("upstream", "record", "vllm", "0.21.0", "--wheel", str(bad)), "--wheel:",
                   "not a readable wheel")


def _break_records(up: Path) -> dict[str, str]:
    """Four broken vLLM records; returns {version: what the error must say}."""
    (up / "vllm-0.18.0.json").unlink()
    text = (up / "vllm-0.18.1.json").read_text()
    (up / "vllm-0.18.1.json").write_text(text[: len(text) // 2])
    doc = json.loads((up / "vllm-0.19.0.json").read_text())
    (up / "vllm-0.19.0.json").write_text(json.dumps({**doc, "schema_version": 99}))
    (up / "vllm-0.19.1.json").write_text((up / "vllm-0.20.0.json").read_text())
    return {"0.18.0": "is missing", "0.18.1": "truncated or not JSON", "0.19.0": "schema_version 99",
            "0.19.1": "holds the record of vllm 0.20.0, expected vllm 0.19.1"}


def test_a_broken_record_is_named_in_one_line(upstream_copy):
    for version, needle in _break_records(upstream_copy).items():
        one_line_error(*cli("upstream", "show", "vllm", version), f"data/upstream/vllm-{version}.json", needle)


def test_one_broken_record_does_not_break_recommend_for_the_others(upstream_copy):
    import warnings

    from sm120lab import upstream

    broken = _break_records(upstream_copy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        have = upstream.versions("vllm")
    assert not set(broken) & set(have) and {"0.17.0", "0.20.0"} <= set(have)
    assert sorted(str(w.message).split()[2].rstrip(":") for w in caught) == sorted(broken)
    assert set(upstream.store.broken("vllm")) == set(broken)
    status, out = cli("recommend", "--vllm", "0.20.0", "--markdown")
    assert status == 0 and "vLLM 0.20.0" in out, out[-2000:]
    status, out = cli("recommend", "--markdown")  # the default release, chosen among the loadable ones
    assert status == 0 and "**Do this:" in out, out[-2000:]
    one_line_error(*cli("recommend", "--vllm", "0.18.1"), "vllm-0.18.1.json", "truncated")


def test_a_damaged_index_is_named_in_one_line(upstream_copy):
    (upstream_copy / "index.json").write_text('{"schema_version": 1, "dists": [')
    one_line_error(*cli("upstream", "show", "vllm", "0.20.0"), "index.json", "expected the upstream index")


@pytest.mark.parametrize("env", ['[]', '"text"', '{"gpu": "x"}', '{"gpu": [1]}'])
def test_recommend_runs_with_a_malformed_environment_skips_that_folder_by_name(tmp_path, env):
    import warnings

    from sm120lab import recommend

    run = tmp_path / "runs" / "r1"
    (run / "results").mkdir(parents=True)
    (run / "environment.json").write_text(env)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert recommend.sm120_runs(tmp_path / "runs") == []
    assert any("r1/environment.json: expected a JSON object whose 'gpu' is an object" in str(w.message)
               for w in caught)
    status, out = cli("recommend", "--runs", str(tmp_path / "runs"), "--markdown")
    assert status == 0 and "Traceback" not in out and "AttributeError" not in out


# --- upstream check-install: a tool's failure is not an answer ---------------------------------------------

_FAKE_PIP = r"""
import json, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("pip 23.2.1 from /fake/pip (python 3.11)")
    sys.exit(0)
# what pip 23.2.1 does: platform options only with --target
if "--python-version" in args and "--target" not in args or MODE == "refuse":
    print("ERROR: Can not use any platform or abi specific options unless installing via '--target'",
          file=sys.stderr)
    sys.exit(1)
if MODE == "no-report":
    sys.exit(0)
reqs = [a for a in args if "==" in a]
with open(args[args.index("--report") + 1], "w") as fh:
    json.dump({"install": [{"metadata": {"name": r.split("==")[0], "version": r.split("==")[1]}} for r in reqs]}, fh)
"""


def _fake_pip(tmp_path: Path, mode: str) -> list[str]:
    script = tmp_path / f"fake_pip_{mode}.py"
    script.write_text(f"MODE = {mode!r}\n" + _FAKE_PIP)
    return [sys.executable, str(script)]


def test_check_install_works_with_a_pip_that_needs_target(tmp_path):
    from sm120lab.upstream.resolve import check_install

    res = check_install(["vllm==0.33.0", "flashinfer-python==0.7.2.post1"], pip=_fake_pip(tmp_path, "like-23.2.1"))
    assert res.ok and res.resolved == {"vllm": "0.33.0", "flashinfer-python": "0.7.2.post1"}


@pytest.mark.parametrize("mode, needle", [("refuse", "Can not use any platform"), ("no-report", "no readable --report")])
def test_check_install_says_pip_failed_instead_of_does_not_install(tmp_path, mode, needle):
    from sm120lab.upstream.resolve import PipFailed, check_install

    with pytest.raises(PipFailed) as exc:
        check_install(["vllm==0.33.0"], pip=_fake_pip(tmp_path, mode))
    msg = str(exc.value)
    assert msg.startswith("pip 23.2.1 ") and needle in msg and "\n" not in msg


def test_check_install_cli_exits_3_on_a_tool_failure(tmp_path, monkeypatch):
    import sm120lab.upstream as upstream
    from sm120lab.upstream import resolve

    real = resolve.check_install
    monkeypatch.setattr(upstream, "check_install",
                        lambda reqs: real(reqs, pip=_fake_pip(tmp_path, "refuse")))
    status, out = cli("upstream", "check-install", "vllm==0.33.0", "flashinfer-python==0.7.2.post1")
    one_line_error(status, out, "pip 23.2.1 failed to run the check, so there is no answer", code=3)
    assert "does NOT install" not in out
    monkeypatch.setattr(upstream, "check_install", real)
    status, out = cli("upstream", "check-install", "vllm==0.17.0", "flashinfer-python==0.6.7")
    assert status == 1 and out.startswith("does NOT install together: ERROR: Cannot install"), out
