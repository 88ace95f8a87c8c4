"""``sm120lab dev``: the developer tools are CLI subcommands (no module of the package has its own main)."""

from __future__ import annotations

import ast
import json

import pytest

from sm120lab.cli import main as cli_main
from sm120lab.paths import data_dir, repo_root

#: modules run as ``python -m`` by the package itself, as worker processes (not tools a developer calls)
WORKERS = {"sm120lab/cli.py", "sm120lab/__main__.py", "sm120lab/toolchains/nvrtc.py",
           "sm120lab/archflags/triton_aot.py"}


def test_no_tool_module_has_its_own_main():
    own = []
    for path in sorted((repo_root() / "sm120lab").rglob("*.py")):
        rel = path.relative_to(repo_root()).as_posix()
        tree = ast.parse(path.read_text())
        if rel not in WORKERS and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            own.append(rel)
    assert not own, f"make these `sm120lab dev` subcommands: {own}"


def test_dev_without_a_tool_prints_help(capsys):
    assert cli_main(["dev"]) == 2
    out = capsys.readouterr().out
    for tool in ("api-check", "arch-suffix", "kernel-aot", "tile-tables", "gpu-probes"):
        assert tool in out


def test_tile_tables_rederive_the_recorded_tables(tmp_path, capsys):
    assert cli_main(["dev", "tile-tables", "--out-dir", str(tmp_path)]) == 0
    for arch in ("sm120", "sm121"):
        assert json.loads((tmp_path / f"{arch}.json").read_text()) == \
            json.loads((data_dir() / "tiles" / f"{arch}.json").read_text())


@pytest.mark.parametrize("argv, arg", [
    (["dev", "tile-tables", "--aot", "no/such/aot.json"], "--aot"),
    (["dev", "kernel-aot", "--jobs", "0"], "--jobs"),
    (["dev", "kernel-aot", "--same-sass-as", "no/such/table.json"], "--same-sass-as"),
    (["dev", "api-check", "extract", "vllm", "0.17.0", "--wheel", "not-a-wheel.txt"], "--wheel"),
])
def test_bad_input_is_one_line_naming_the_argument(argv, arg):
    with pytest.raises(SystemExit) as exc:
        cli_main(argv)
    msg = str(exc.value)
    assert msg.startswith(f"{arg}:") and "\n" not in msg
