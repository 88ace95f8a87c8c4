"""Test modules that run the Triton kernels under Triton's CPU interpreter.

Triton's interpreter only works if TRITON_INTERPRET=1 is set before triton is first imported (triton.language's
own @jit helpers are created at import; Triton also reads the variable lazily at the first launch, so it stays set
for the process). A module calls :func:`enable` before importing the kernels; if another test module imported
triton first, the module's tests skip and :func:`rerun_in_fresh_process` runs the whole file again in a new
process instead.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: the variable as the process started (this module is imported before :func:`enable` first sets it)
_SET_AT_START = os.environ.get("TRITON_INTERPRET") == "1"
#: :func:`enable` set the variable before triton's first import in this process
_SET_BEFORE_IMPORT = False


def enable() -> bool:
    """Set TRITON_INTERPRET=1; True when this process can interpret: the variable was set before triton's first
    import, here or from the start. (The variable alone does not tell: an earlier module's :func:`enable` may have
    set it after another module had imported triton.)"""
    global _SET_BEFORE_IMPORT
    if "triton" not in sys.modules:
        _SET_BEFORE_IMPORT = True
    os.environ["TRITON_INTERPRET"] = "1"
    return _SET_BEFORE_IMPORT or _SET_AT_START


def needs_interp(fresh: bool, interpreting: bool):
    """The skip mark of the interpreter tests."""
    return pytest.mark.skipif(not (fresh and interpreting),
                              reason="triton was imported before TRITON_INTERPRET=1: see test_in_fresh_process")


def rerun_in_fresh_process(fresh: bool, test_file: str):
    """A test (one per module: assign it to ``test_in_fresh_process``) that runs ``test_file`` in a new process
    with TRITON_INTERPRET=1, skipped when this process interprets already."""

    @pytest.mark.skipif(fresh, reason="this process runs the interpreter tests directly")
    def test_in_fresh_process():
        env = dict(os.environ, TRITON_INTERPRET="1")
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file], env=env,
                             capture_output=True, text=True, timeout=900, cwd=Path(__file__).resolve().parents[1])
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]

    return test_in_fresh_process
