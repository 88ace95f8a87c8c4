# Two commands for a fresh Linux machine:
#   make run    execute every notebook through papermill into runs/<UTC timestamp>-<host>/
#   make test   unit tests + nbval over every notebook
# Each creates .venv (if missing) and installs the pinned environment first.
#
# GPU workstation with torch/triton already installed: reuse them instead of the CPU pins with
#   make run VENV_FLAGS=--system-site-packages     (or PYTHON=/path/to/env/bin/python VENV=/path/to/env)
# torch/triton are only installed when `import torch` / `import triton` fail in the venv.

PYTHON      ?= python3
VENV        ?= .venv
VENV_FLAGS  ?=
TORCH_PIN   ?= torch==2.13.0
TRITON_PIN  ?= triton==3.9.0
RUN_ARGS    ?=
PYTEST_ARGS ?=

VPY := $(VENV)/bin/python
STAMP := $(VENV)/.sm120lab-installed

.PHONY: run test setup lab lint clean-venv

$(VPY):
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)

$(STAMP): $(VPY) pyproject.toml constraints.txt
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -c "import torch" 2>/dev/null || $(VPY) -m pip install -q "$(TORCH_PIN)"
	$(VPY) -c "import triton" 2>/dev/null || $(VPY) -m pip install -q "$(TRITON_PIN)"
	$(VPY) -m pip install -q -c constraints.txt -e ".[test]"
	$(VPY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/sm120lab run $(RUN_ARGS)

lint: $(STAMP)
	$(VPY) -m ruff check sm120lab tests notebooks/src tools scripts

test: $(STAMP) lint
	$(VPY) -m pytest $(PYTEST_ARGS) tests --nbval-lax notebooks

# JupyterLab over the same venv (pinned in constraints.txt); opens notebooks/.
lab: $(STAMP)
	$(VPY) -m pip install -q -c constraints.txt -e ".[lab]"
	$(VENV)/bin/jupyter lab notebooks

clean-venv:
	rm -rf $(VENV)
