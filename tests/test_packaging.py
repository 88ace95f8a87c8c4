"""Set-up files stay in step: pyproject, constraints.txt, environment.yml, Makefile, .ci/run."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, ver = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = ver
    return pins


def test_every_dependency_is_pinned_in_constraints():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"]) + project["optional-dependencies"]["test"]
    pins = _constraints()
    for dep in deps:
        name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0]).lower()
        if name in ("torch", "triton"):
            continue  # pinned in the Makefile, installed only when absent
        assert name in pins, f"{name} is not pinned in constraints.txt"


def test_environment_yml_matches_makefile_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_lines = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    make = (ROOT / "Makefile").read_text()
    torch_pin = re.search(r"TORCH_PIN\s*\?=\s*(\S+)", make).group(1)
    triton_pin = re.search(r"TRITON_PIN\s*\?=\s*(\S+)", make).group(1)
    assert torch_pin in pip_lines and triton_pin in pip_lines
    assert "-c constraints.txt" in pip_lines and "-e .[test]" in pip_lines
    py = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert tuple(map(int, py.split("=")[1].split("."))) >= (3, 10)


def test_ci_calls_exactly_make_test():
    body = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert body[-1].strip() in ("make test", "exec make test")
