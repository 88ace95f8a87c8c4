"""CUDA C++ -> PTX through one toolkit's NVRTC shared library, loaded with ctypes.

NVRTC API (``nvrtc.h``): nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetProgramLogSize/Log,
nvrtcGetPTXSize/PTX, nvrtcDestroyProgram, nvrtcVersion. Every 12.x libnvrtc has the soname
``libnvrtc.so.12``, so two versions cannot safely live in one process: :func:`compile_ptx` runs
each compile in a fresh worker process (``python -m sm120lab.toolchains.nvrtc``, ~0.1 s).
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

NVRTC_ERROR_INVALID_OPTION = 5


def _compile_in_process(lib_path: str, source: str, name: str, options: list[str]) -> dict:
    lib = ctypes.CDLL(lib_path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc != 0:
        return {"rc": rc, "log": f"nvrtcCreateProgram failed ({rc})", "ptx": None}
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    rc = lib.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if rc == NVRTC_ERROR_INVALID_OPTION and not log.strip():
        arch = [o for o in options if o.startswith("--gpu-architecture")]
        log = f"nvrtc: error: invalid value for {arch[0] if arch else '--gpu-architecture'}"
    ptx = None
    if rc == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        pbuf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, pbuf)
        ptx = pbuf.value.decode(errors="replace")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return {"rc": rc, "log": log, "ptx": ptx, "nvrtc_version": f"{major.value}.{minor.value}"}


def compile_ptx(lib_path: str, source: str, arch: str, options: list[str] | None = None,
                name: str = "probe.cu", timeout: float = 300) -> dict:
    """Compile ``source`` for ``arch`` (e.g. ``compute_120f``) in a worker process.

    Returns ``{"rc": int, "log": str, "ptx": str | None}``; rc 0 is success.
    """
    opts = [f"--gpu-architecture={arch}", *(options or [])]
    payload = json.dumps({"lib": lib_path, "source": source, "name": name, "options": opts})
    proc = subprocess.run([sys.executable, "-m", "sm120lab.toolchains.nvrtc"], input=payload,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return {"rc": -1, "log": (proc.stderr or proc.stdout).strip()[-2000:], "ptx": None}
    return json.loads(proc.stdout)


def _main() -> int:
    req = json.loads(sys.stdin.read())
    out = _compile_in_process(req["lib"], req["source"], req["name"], req["options"])
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
