# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · An NVFP4 MoE kernel in Triton: packed weights, a decode kernel, and the distance to the floor
#
# A Mixture-of-Experts layer at decode time reads the weights of the ~10 experts each token picks
# and does almost no arithmetic with them: its floor is **bytes of NVFP4 weights / memory
# bandwidth**. This lesson follows `sm120lab.kernels` from the one-time weight preparation to the
# kernel, checks it against an exact reference, and reads a recorded benchmark (by default the newest:
# a lent H100's tuning of 2026-12-07 at the Qwen3.5-397B-A17B MoE shape, H=4096, I=1024, E=512, top-10;
# the H200 runs of 2026-12-03/04 are in `data/bench/` too) as "% of that floor" for ours and
# every peer, **vLLM's Marlin NVFP4 MoE** among them: the kernel SM120 owners serve with today, run from
# vLLM 0.26.0's own wheel on the same weights and routings (`sm120lab upstream vllm-cache`). Marlin uses
# `mma.sync`, the tensor-core class SM120 has, so ours against Marlin is the comparison that carries
# over. On a machine with a CUDA GPU it also measures live; on a CPU it runs the kernel under
# Triton's interpreter and shows the recorded numbers. The SM120 path is compiled ahead of time
# only: **unverified on SM120 hardware**.

# %%
import glob
import json
import os

import torch

if not torch.cuda.is_available():
    # no GPU: run the Triton kernels under the CPU interpreter (must be set before triton is imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from sm120lab.bench import lesson
from sm120lab.bench.plot import plot_moe
from sm120lab.kernels.layout import decode_tile_layout, frag_tile_map, plot_decode_tile, plot_frag_tile
from sm120lab.kernels.moe_frag import frag_supported
from sm120lab.kernels.moe_layer import interpreting
from sm120lab.kernels.plan import FRAG_MAX_ROWS
from sm120lab.kernels.prepack import prepare_moe_weights
from sm120lab.moe import make_moe_problem
from sm120lab.moe.reference import moe_reference
from sm120lab.runs import answer

pd.set_option("display.width", 200)

# %% tags=["parameters"]
# the recorded run (path relative to notebooks/): the H100 tuning of 2026-12-07, Marlin in the same process
bench_json = "../data/bench/moe_h100-80gb-hbm3_2026-12-07_qwen3.5-397b-a17b_tune.json"
# the same tuning's files for every preset and two untuned shapes (section 4's comparison with Marlin)
marlin_glob = "../data/bench/moe_h100-80gb-hbm3_2026-12-07_*_tune.json"
# "auto": also time the layer live when this machine has a CUDA GPU; "off": recorded data only
live = "auto"
# T values timed live (the qwen3.5-397b-a17b layer needs ~20 GB of GPU memory for all contenders)
live_tokens = [1, 16]
# seed of the small correctness problem
seed = 0

# %% [markdown]
# ## The answer

# %%
with open(bench_json) as fh:
    run = json.load(fh)

# correctness on this machine: the kernel called from the package on a small problem, poisoned output
prob = make_moe_problem("tiny", tokens=6, routing="uniform", seed=seed,
                        device="cuda" if torch.cuda.is_available() else "cpu")
packed = prepare_moe_weights(prob.w13_swizzled, prob.w2_swizzled)
round_trip = lesson.packed_round_trip(prob.w13_swizzled, prob.w2_swizzled, packed)
ref = moe_reference(prob.hidden, prob.topk_ids, prob.topk_weights, prob.w13, prob.w2, dtype=torch.float64)
kernel = lesson.run_packed(prob, packed, ref)   # relative error vs fp64, every output written
where = "CPU interpreter" if interpreting() else torch.cuda.get_device_name()

gpu = run["env"]["gpu"]["name"]
box = [answer.Answer(*row) for row in lesson.headline_rows(run, kernel, round_trip=round_trip, where=where,
                                                            fragment=frag_supported(prob.hidden.device))]
answer.show(box, title=f"NVFP4 MoE kernel: this machine ({where}) and the recorded {gpu} run")
_ = answer.record(box, "07_nvfp4_moe_kernel")

# %% [markdown]
# ## 1. The packed layout
#
# `prepare_moe_weights(w13, w2)` runs once per model. It keeps the canonical bytes (element `2j`
# in the low nibble of byte `j`) but hands the kernel **int32 words of 8 codes**, the scales
# **linear** (a 128x4-swizzled checkpoint is unswizzled here, once) and `alpha = 2**6 / gs` per
# expert. Its inverse is exact, byte for byte (checked above and with hypothesis in CI).
#
# Inside the kernel one word becomes 8 fp32 weights in 7 integer operations plus 4 conversions:
# each E2M1 code `s|m` (sign, 3-bit magnitude) is rewritten as the E4M3 byte `s<<7 | m<<2`, which is
# exactly `e2m1 * 2**-6`, and `cvt.rn.f16x2.e4m3x2` turns two such bytes into two halves.

# %%
p13 = packed.w13
print(f"w13 words {tuple(p13.words.shape)} {p13.words.dtype}, scales {tuple(p13.scales.shape)} {p13.scales.dtype}, "
      f"alpha {tuple(p13.alpha.shape)}")
lesson.word_codes_table(int(p13.words[0, 0, 0]) & 0xFFFFFFFF)   # the first word of expert 0's w13

# %% [markdown]
# **Which thread holds which codes and scales.** Triton picks the register layout of the weight
# tile; we compile the decode kernel for sm_120 (no GPU needed) and read it from the compiled
# code. Each cell is one int32 word (8 codes) of one weight row in one K step, labelled with the
# thread that loads it. With the tile the H200 sweep chose for T = 4 and 16 (`d8x32w1s1p2`: 8 rows,
# 32 words, one warp), a thread loads 4 consecutive words (16 bytes, 32 codes, exactly the 2 scale
# bytes `w // 2`) of a gate row **and** of the matching up row, so SiLU(gate) * up needs no
# exchange between threads; 8 threads cover a row's 32 words, 4 rows per pass.

# %%
tile = decode_tile_layout("d8x32w1s1p2", cc=120)
plot_decode_tile(tile)
plt.tight_layout()
plt.show()

# %% [markdown]
# **The fragment layout (the tensor-core path).** On a GPU, `fused_moe_packed` runs
# `sm120lab.kernels.moe_frag` instead: one warp feeds a 16-row weight tile to
# `mma.sync.m16n8k16` (bf16 in, fp32 accumulate) as the A operand and up to 8 routed slots'
# activations as B, so the output comes out transposed. `prepare_moe_weights` also stores every
# 16 x 64 tile as 32 lanes x 4 int32 words, word `j` of lane `(g, t)` holding exactly the 8 codes
# that lane contributes to the `j`-th MMA: rows `g` and `g + 8`, K columns `16t + 4j .. +3`. An
# MMA's 16 K slots only have to match between A and B, so a lane's 4 words cover one scale block
# (16 columns): one scale pair per lane per chunk, and its activations for the 4 MMAs are 16
# consecutive bf16 (two 16-byte loads). The map below is measured on the packing code itself
# (each code flipped in turn, the changed word recorded). Bits inside a word are scattered so that
# `rotr(word, r) & 0x81C081C0` is already the bf16x2 pattern `sign<<15 | magnitude<<6` of two codes
# (`e2m1 * 2**-126`); one `mul.rn.bf16x2` by the block scale times `2**119` gives the exact weight.

# %%
fmap = frag_tile_map()
plot_frag_tile(fmap)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. The kernel, called from the package
#
# `fused_moe_packed(hidden, topk_ids, topk_weights, packed)` picks, on a GPU with sm_90+, the
# fragment kernels (`sm120lab.kernels.moe_frag`) up to `FRAG_MAX_ROWS` routed rows per active expert
# (printed below) and the MMA kernel (`moe_gemm`, on the canonical words) above; elsewhere (this CPU interpreter, older GPUs)
# the CUDA-core decode kernel (`moe_decode`) up to 1 row per expert. All compute
# `alpha_e * sum_k e2m1 * SF * a` exactly in fp32 (the order of additions differs) and write
# `silu(gate) * up` (w13) and the routing-weighted sum over the k choices (w2). Every path this
# machine can run, on the tiny preset with poisoned outputs:

# %%
print(f"the formula's fragment path: up to {FRAG_MAX_ROWS:.0f} rows per active expert")
lesson.path_table(prob, packed, ref)

# %% [markdown]
# ## 3. Correctness in the recorded run
#
# Every benchmark run starts with these checks (fresh weights and routings from the recorded seed,
# poisoned outputs): ours against the fp64 reference at model shape, the inline-PTX decode against
# its portable Triton path, and the baseline's W4A4 against emulated W4A4.

# %%
pd.DataFrame(run["checks"])

# %% [markdown]
# ## 4. The benchmark: % of the NVFP4 weight-byte floor
#
# 100% = streaming the active experts' 4-bit weights once at the copy bandwidth measured in the same
# process. The bf16 and FP8 peers move 3.6x and 1.8x more bytes, so their own ceilings sit lower
# on this axis; the dotted line is the target (within 1.35x of the floor).

# %%
plot_moe(run)
plt.show()

# %%
lesson.bench_table(run)

# %% [markdown]
# ### Against vLLM's Marlin on every preset and two untuned shapes
#
# Marlin time / ours per T from the same tuning's files (above 1: ours is faster), then the sentence the
# README's kernel row carries, computed from the same numbers.

# %%
marlin_files = sorted(glob.glob(marlin_glob))
if marlin_files:
    shapes = lesson.marlin_shapes(marlin_files)
    lesson.plot_marlin_shapes(shapes, gpu=gpu)
    plt.show()
    print(lesson.marlin_range_text(lesson.marlin_ranges(marlin_files)))
    display(shapes.round(2))
else:
    print(f"no recorded files match {marlin_glob}: nothing to compare")

# %% [markdown]
# ### Where the time goes
#
# The same run's kernels one by one (`torch.profiler`, device time per layer call), for ours and vLLM's
# Marlin at T=1 and T=4096. Ours runs the path its plan chose at each T (the kernel names say which:
# `moe_w4a16_frag*` the fragment kernels, `moe_gemm*` the MMA kernel, `moe_sort_*` the routing sort);
# Marlin's two `Marlin<...>` GEMM launches, its `moe_align_block_size`, SiLU-and-mul and k-sum kernels
# are listed beside it.

# %%
lesson.profile_table(run, tokens=(1, 4096))

# %% [markdown]
# ## 5. Live on this machine (GPU only)
#
# The same contenders at `live_tokens`, timed with `triton.testing.do_bench_cudagraph` on this GPU.

# %%
live_doc = lesson.live_run(live_tokens, enabled=live == "auto")   # None without a CUDA GPU
if live_doc is not None:
    plot_moe(live_doc)
    plt.show()
print(lesson.live_targets_text(live_doc))

# %% [markdown]
# ## What the numbers say
#
# The recorded run, target by target (computed from `bench_json`; the reasons for each miss, from
# the compiled code, are in notes/triton_kernels.md):

# %%
for a in box[2:8]:
    print(f"{a.status.name:8s} {a.claim}: {a.value} ({a.why})")
