"""Triton rows of the matrix: compile :mod:`.triton_probes` ahead of time for a GPU we do not
have, ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`` (Triton's own ptxas,
no GPU), and record the MMA instruction each lowers to (grep of the PTX) and ``metadata.shared``.

Run in a fresh process (``python -m sm120lab.archflags.triton_aot``) when the calling process
may have Triton in interpreter mode (TRITON_INTERPRET=1)."""

from __future__ import annotations

import json
import re
import sys
import time

TRITON_PROBES = {
    "triton_dot_bf16": "tl.dot bf16 x bf16 -> f32",
    "triton_dot_scaled_mxfp4": "tl.dot_scaled e2m1 x e2m1, E8M0 scale per 32 (MXFP4)",
    "triton_dot_scaled_nvfp4": "tl.dot_scaled e2m1 x e2m1, E4M3 scale per 16 (NVFP4)",
}
DEFAULT_CCS = (90, 100, 120, 121)
_MMA_RE = re.compile(r"^\s*(?:@!?%?\w+\s+)?((?:mma\.sync|wgmma\.mma_async|tcgen05\.mma)[.\w:]*)", re.M)


def _compile(probe: str, cc: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import triton_probes as tp

    BM, BN, BK = 128, 64, 128
    if probe == "triton_dot_bf16":
        src = ASTSource(fn=tp.dot_bf16_kernel, signature={"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32",
                        "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                        constexprs={"BM": BM, "BN": BN, "BK": 64})
    else:
        group, sdt = (32, "*u8") if probe == "triton_dot_scaled_mxfp4" else (16, "*fp8e4nv")
        src = ASTSource(fn=tp.dot_scaled_fp4_kernel,
                        signature={"a_ptr": "*u8", "as_ptr": sdt, "b_ptr": "*u8", "bs_ptr": sdt, "c_ptr": "*fp32",
                                   "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GROUP": "constexpr"},
                        constexprs={"BM": BM, "BN": BN, "BK": BK, "GROUP": group})
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": 4})
    ptx = k.asm["ptx"]
    instrs = sorted(set(_MMA_RE.findall(ptx)))
    target = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    return {"seconds": round(time.perf_counter() - t0, 2), "instructions": instrs,
            "shared": int(k.metadata.shared), "ptx_target": target.group(1) if target else None}


def compile_row(probe: str, cc: int) -> dict:
    """One Triton cell in the same record format as the C++ cells."""
    import triton
    rec = {"probe": probe, "toolkit": f"triton-{triton.__version__}", "toolkit_version": triton.__version__,
           "frontend": "triton", "target": f"triton:sm_{cc}", "arch": f"cuda:{cc}", "code": f"sm_{cc}",
           "flags": [], "status": None, "stage": None, "error": None, "seconds": None, "sass": [], "stub": False,
           "feature_in_sass": False, "macros": {}, "sass_read": False, "cached": False,
           "ptx_instructions": [], "shared": None}
    try:
        out = _compile(probe, cc)
    except Exception as exc:  # a Triton lowering failure is a result, recorded as such
        msg = str(exc).strip().splitlines()
        rec.update(status="error", stage="triton", error=(msg[0] if msg else type(exc).__name__)[:300])
        return rec
    rec.update(status="accepted", seconds=out["seconds"], ptx_instructions=out["instructions"],
               shared=out["shared"], ptx_target=out["ptx_target"])
    return rec


def triton_rows(ccs=DEFAULT_CCS, probes=tuple(TRITON_PROBES)) -> list[dict]:
    """All Triton rows, compiled in a fresh interpreter (safe under TRITON_INTERPRET=1)."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    payload = json.dumps({"ccs": list(ccs), "probes": list(probes)})
    proc = subprocess.run([sys.executable, "-m", "sm120lab.archflags.triton_aot"], input=payload,
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"Triton AOT worker failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
    return json.loads(proc.stdout)


def _main() -> int:
    req = json.loads(sys.stdin.read() or "{}")
    rows = [compile_row(p, cc) for p in req.get("probes", TRITON_PROBES) for cc in req.get("ccs", DEFAULT_CCS)]
    sys.stdout.write(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
