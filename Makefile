# Commands for a fresh Linux machine:
#   make run        execute every notebook through papermill into runs/<UTC timestamp>-<host>-<gpu>/
#   make test       lint + unit tests + nbval over every notebook, offline (reads data/ and the caches)
#   make test-full  the same plus the tests marked network (real PyPI wheels) and slow
#   make lab        JupyterLab over the same venv
#   make fresh-seeds  the seed-dependent tests at fresh seeds, then a false-alarm sweep at a fresh seed,
#                   recorded under data/correctness/fresh_seeds/ (make test itself uses fixed seeds)
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
TEST_MARKS  ?= not network and not slow
LAB_ARGS    ?=

VPY := $(VENV)/bin/python
STAMP := $(VENV)/.sm120lab-installed

.PHONY: run test test-full fresh-seeds setup lab lint clean-venv notebooks notebook

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
	$(VPY) -m ruff check sm120lab tests notebooks/src scripts

# make test never reaches the package index (PIP_NO_INDEX=1): tests read the facts recorded in data/;
# downloading wheels is the job of the commands that record them. Tests marked network (checks against
# the real FlashInfer, vLLM, cuBLAS and CUDA toolkit wheels, about 1 GB the first time) or slow run in
# make test-full.
test: $(STAMP) lint
	PIP_NO_INDEX=1 $(VPY) -m pytest -m "$(TEST_MARKS)" $(PYTEST_ARGS) tests --nbval-lax notebooks

test-full: $(STAMP) lint
	$(VPY) -m pytest $(PYTEST_ARGS) tests --nbval-lax notebooks

# Fresh seeds (notes/correctness.md, "Deterministic CI"): make test draws every seed from the test's id, so
# it gives the same answer on every run. This target is the separate check at new seeds, run before each
# stop: the seed-dependent tests with SM120LAB_FRESH_SEEDS=1 (each failing test prints its SM120LAB_SEED),
# then `sm120lab check --sweep` at a fresh first seed, written with its command and environment to
# data/correctness/fresh_seeds/sweep_<UTC date>_seed<first seed>.json. Any failure becomes a fixed-seed test.
FRESH_N       ?= 25
FRESH_PRESETS ?= tiny,small
FRESH_DEVICE  ?= cpu
FRESH_JOBS    ?= 2
FRESH_TESTS   ?= tests/test_moe_sweep.py tests/test_moe_verdict_properties.py tests/test_moe_harness.py

fresh-seeds: $(STAMP)
	SM120LAB_FRESH_SEEDS=1 PIP_NO_INDEX=1 $(VPY) -m pytest -m "$(TEST_MARKS)" -q -ra $(FRESH_TESTS); \
	tests=$$?; \
	seed=$$($(VPY) -c "import os; print(int.from_bytes(os.urandom(4), 'little') & 0x7FFFFFFF)"); \
	$(VENV)/bin/sm120lab check --sweep $(FRESH_N) --preset $(FRESH_PRESETS) --routing all --seed $$seed \
	  --device $(FRESH_DEVICE) --jobs $(FRESH_JOBS) --json data/correctness/fresh_seeds/sweep_$$(date -u +%Y-%m-%d)_seed$$seed.json; \
	sweep=$$?; \
	test $$tests -eq 0 && test $$sweep -eq 0

# JupyterLab over the same venv (pinned in constraints.txt); opens notebooks/. As root (GPU
# containers) it adds --allow-root; extra flags pass through: make lab LAB_ARGS="--no-browser --port 8899".
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(VPY) -c "import jupyterlab" 2>/dev/null || $(VPY) -m pip install -q -c constraints.txt -e ".[lab]"
	$(VENV)/bin/jupyter lab $(LAB_ROOT) $(LAB_ARGS) notebooks

# Notebooks: notebooks/src/NN_name.py (jupytext percent format) is the truth. Build each into
# notebooks/NN_name.ipynb with jupytext and execute it from notebooks/ (relative paths such as
# ../data/ resolve there); cell tags (`parameters` for papermill) and `# NBVAL_CHECK_OUTPUT` lines
# travel with the cells. tests/test_notebooks.py fails when a committed .ipynb drifts from its source.
#   make notebooks            build + execute every notebook
#   make notebook NB=03       build + execute one (or several: NB="01 04")
NB_SOURCES = $(sort $(wildcard notebooks/src/[0-9][0-9]_*.py))
NB_BUILD = $(VENV)/bin/jupytext --to ipynb --set-kernel python3 --execute --run-path notebooks

notebooks: $(STAMP)
	@for src in $(NB_SOURCES); do \
	  echo "== $$src"; \
	  $(NB_BUILD) -o notebooks/$$(basename $$src .py).ipynb $$src || exit 1; \
	done

notebook: $(STAMP)
	@test -n "$(NB)" || { echo "NB: expected a notebook number, e.g. make notebook NB=03"; exit 2; }
	@for n in $(NB); do \
	  src=$$(ls notebooks/src/$${n}_*.py 2>/dev/null | head -n 1); \
	  test -n "$$src" || { echo "NB: no notebooks/src/$${n}_*.py"; exit 2; }; \
	  echo "== $$src"; \
	  $(NB_BUILD) -o notebooks/$$(basename $$src .py).ipynb $$src || exit 1; \
	done

clean-venv:
	rm -rf $(VENV)
