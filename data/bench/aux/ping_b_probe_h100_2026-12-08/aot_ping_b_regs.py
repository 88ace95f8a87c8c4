import json
import sys

# Record of the seventeenth round of issue 30 (kept with its results; the PING+SHARE_B tiles need ping_share_b.patch
# applied). Usage, from the repository root: python3 aot_ping_b_regs.py CC TILES, e.g. 90
# f2w2oc4b,f2w2oc4d2b,f2w2oc4d4b: one JSON line per (kernel, tile) with ptxas registers, spills and the K loop's
# instructions per weight element from Triton AOT. A PING loop step holds PING chunks, so its figure is per step:
# divide by PING for instructions per weight element.
sys.path[:0] = [".", "scripts"]
from wide_b_probe import tile_named  # noqa: E402

from sm120lab.archflags import kernel_aot as ka  # noqa: E402

cc = int(sys.argv[1])
for name in sys.argv[2].split(","):
    for v in ("w13_frag", "w2_frag"):
        r = ka.compile_variant(v, tile_named(name), cc)
        print(json.dumps({k: r.get(k) for k in ("kernel", "config", "n_regs", "n_spill_stores", "n_spill_loads")}
                         | {"ipe_per_step": r.get("loop", {}).get("instructions_per_element"), "cc": cc}), flush=True)
