import sys, json
# Record of the sixteenth round of issue 30 (kept with its results; the register-cap pairs need maxnreg_probe.patch applied).
# Usage: python3 aot_maxnreg_regs.py CC TILES CAPS, e.g. 90 f2w2oc4b,f4w2oc4b 112,104,96: one JSON line per
# (kernel, tile, cap) with ptxas registers and spills from Triton AOT (cap 0: none).
from sm120lab.archflags import kernel_aot as ka
from sm120lab.kernels.moe_configs import FRAG_CONFIGS
orig = ka.compile_kernel
def run(variant, name, cc, maxnreg):
    def patched(fn, ptrs, ce, cc_, nw, ns, div=(), options=None):
        return orig(fn, ptrs, ce, cc_, nw, ns, div, {**(options or {}), **({"maxnreg": maxnreg} if maxnreg else {})})
    ka.compile_kernel = patched
    try:
        r = ka.compile_variant(variant, FRAG_CONFIGS[name], cc)
    finally:
        ka.compile_kernel = orig
    return {k: r.get(k) for k in ("kernel", "config", "n_regs", "n_spill_stores", "n_spill_loads", "local_bytes")} | {"ipe": r.get("loop", {}).get("instructions_per_element"), "maxnreg": maxnreg}
names = [v.name for v in ka._variants()]
print(names, file=sys.stderr)
for cfg in sys.argv[2].split(","):
    for v in ("w13_frag", "w2_frag"):
        for m in [0] + [int(x) for x in sys.argv[3].split(",")]:
            print(json.dumps(run(v, cfg, int(sys.argv[1]), m)), flush=True)
