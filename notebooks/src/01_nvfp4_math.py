# %% [markdown]
# # 01 · NVFP4, exactly
#
# Every later notebook (correctness diffs, kernels, tok/s) measures against the reference in
# `sm120lab.nvfp4`. This one shows what that reference computes, bit by bit, and how much
# accuracy NVFP4 costs against the other 4-bit and 8-bit formats. The box below is this run's
# answer; the sections after it show the evidence.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from sm120lab.nvfp4 import (
    E2M1_VALUES,
    dequantize_nvfp4,
    e2m1_decode,
    e2m1_encode,
    quantize_nvfp4,
    swizzle_scales_128x4,
)
from sm120lab.nvfp4.quant_error import cuda_matches_cpu, error_table, sample_distribution, tensor_scale_effect
from sm120lab.runs import answer, results
from sm120lab.runs.answer import Answer, Status

pd.set_option("display.width", 160)
pd.set_option("display.float_format", lambda v: f"{v:.4g}")

# %% tags=["parameters"]
seed = 0
rows = 256
cols = 2048
distributions = ["gaussian", "student_t", "outlier_channels"]
example_seed = 7

# %%
table = pd.DataFrame(error_table(distributions, (rows, cols), seed))
pivot = table.pivot(index="format", columns="distribution", values="relative_error")
four_bit = pivot.drop(index="FP8 E4M3 (tensor)")
best4 = four_bit.idxmin()
g = torch.Generator().manual_seed(seed)
w = sample_distribution("gaussian", (rows, cols), g) * 1e-2   # small weights: block amax ~1e-3
scale_effect = tensor_scale_effect(w)
same_on_gpu, gpu_what = cuda_matches_cpu(sample_distribution("outlier_channels", (rows, cols), g))

nv = pivot.loc["NVFP4 (16, E4M3)"]
box = [
    Answer("NVFP4 error on Gaussian weights (relative Frobenius)", f"{nv['gaussian']:.3f}", Status.info,
           f"MXFP4 {pivot.loc['MXFP4 (32, E8M0)', 'gaussian']:.3f}, INT4 g128 {pivot.loc['INT4 (g128, fp16)', 'gaussian']:.3f}, "
           f"FP8 {pivot.loc['FP8 E4M3 (tensor)', 'gaussian']:.3f}; {rows}x{cols}, seed {seed}"),
    Answer("lowest-error 4-bit format", ", ".join(sorted(set(best4))),
           Status.ok if set(best4) == {"NVFP4 (16, E4M3)"} else Status.warn,
           f"on {len(best4)} of {len(best4)} distributions: " + ", ".join(f"{d} {four_bit[d].min():.3f}" for d in best4.index)),
    Answer("NVFP4 needs its FP32 per-tensor scale", "yes" if scale_effect["gs_1"] > 2 * scale_effect["with_gs"] else "no",
           Status.info, f"small weights: error {scale_effect['with_gs']:.3f} with gs = 448*6/amax, {scale_effect['gs_1']:.3f} "
           f"with gs = 1 ({scale_effect['zero_scale_blocks']:,} of {scale_effect['blocks']:,} block scales round to 0)"),
    Answer("this GPU's quantizer = the CPU reference, bit for bit",
           {True: "yes", False: "NO", None: "not run"}[same_on_gpu],
           {True: Status.ok, False: Status.bad, None: Status.not_run}[same_on_gpu], gpu_what),
]
answer.show(box)
_ = answer.record(box, "01_nvfp4_math")

# %% [markdown]
# ## 1. The grids
#
# **E2M1** (1 sign, 2 exponent, 1 mantissa bit): eight magnitudes, code 1 is the only subnormal.
# Rounding is to nearest, ties to the even code; anything beyond ±6 saturates (PTX `cvt.rn.satfinite`).

# %%
# NBVAL_CHECK_OUTPUT
grid = pd.DataFrame({"code": [f"0x{c:X}" for c in range(16)], "value": list(E2M1_VALUES)})
print(grid.T.to_string(header=False))
mids = [(a + b) / 2 for a, b in zip(E2M1_VALUES[:7], E2M1_VALUES[1:8])]
print("midpoints:", mids)
print("each midpoint rounds to code:", [f"0x{int(c):X}" for c in e2m1_encode(torch.tensor(mids))], "(the even one)")

# %% [markdown]
# **E4M3** block scales (`float8_e4m3fn`): 4 exponent bits, 3 mantissa bits, max 448, no infinity.
# Scales are non-negative, so 126 usable positive values plus zero, from 2^-9 (subnormal) to 448.

# %%
# NBVAL_CHECK_OUTPUT
e4m3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
pos = torch.unique(e4m3[(e4m3 > 0) & torch.isfinite(e4m3)])
print(f"positive finite E4M3 values: {pos.numel()}, smallest {pos[0].item():.6g} (2^{np.log2(pos[0].item()):.0f}), "
      f"largest {pos[-1].item():g}; dynamic range {pos[-1].item() / pos[0].item():.0f}x")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 2.8))
v = np.array(E2M1_VALUES)
for sign, colour, label in ((1, "C0", "positive codes 0x0-0x7"), (-1, "C3", "negative codes 0x8-0xF")):
    sel = np.signbit(v) == (sign < 0)
    axes[0].scatter(v[sel], np.zeros(sel.sum()), c=colour, s=60, zorder=3, label=label)
for c, val in enumerate(E2M1_VALUES):
    if c not in (0, 8):
        axes[0].annotate(f"{c:X}", (val, 0), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
axes[0].set_yticks([])
axes[0].set_xlabel("E2M1 value")
axes[0].set_title("E2M1 values (label: 4-bit code)")
axes[0].legend(fontsize=7, loc="lower right")
axes[0].grid(axis="x", alpha=.3)
axes[1].scatter(pos.numpy(), np.zeros(pos.numel()), s=8, marker="|")
axes[1].set_xscale("log", base=2)
axes[1].set_yticks([])
axes[1].set_xlabel("E4M3 value (log2 axis)")
axes[1].set_title("the 126 positive E4M3 values (block scales)")
axes[1].grid(axis="x", alpha=.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. Why 16-element blocks plus a tensor scale
#
# One E2M1 code has a dynamic range of 12 (0.5 to 6). Each 16-element block gets its own E4M3
# scale `SF = e4m3(gs * amax_block / 6)`, so the block's largest element lands near ±6. E4M3 covers
# 2^-9..448, but only if the numbers are moved into that window first: the FP32 tensor scale
# `gs = 448*6/amax` maps the tensor's largest block onto SF = 448 exactly. Without it, small
# tensors (weights are ~1e-2, their blocks' amax/6 ~1e-3) fall into E4M3's subnormal range where
# scales are coarse, or to zero. The numbers, from the box above:

# %%
# NBVAL_IGNORE_OUTPUT
print(f"amax = {w.abs().max():.3e}; relative error with gs = 448*6/amax: {scale_effect['with_gs']:.4f}; "
      f"with gs = 1: {scale_effect['gs_1']:.4f} ({scale_effect['zero_scale_blocks']} of {scale_effect['blocks']} "
      "blocks got scale 0)")

# %%
# NBVAL_CHECK_OUTPUT
print("tensor scale needed (gs=1 loses more than 2x the accuracy):", scale_effect["gs_1"] > 2 * scale_effect["with_gs"])

# %% [markdown]
# ## 3. Error against other 4-bit and 8-bit formats
#
# Same tensors for every format: Gaussian weights, heavy-tailed Student-t (ν=3) values, and
# activations with 1% outlier channels (x50). Bits per element include the scales.

# %%
# NBVAL_IGNORE_OUTPUT
bits = table.drop_duplicates("format").set_index("format")["bits_per_element"]
print(pivot.assign(bits_per_element=bits).to_string(float_format=lambda x: f"{x:.4f}"))

# %%
# NBVAL_CHECK_OUTPUT
print("lowest-error 4-bit format per distribution:")
print(best4.to_string())

# %%
ax = pivot.T.plot.bar(figsize=(9, 3.4), rot=0, width=0.8)
ax.set_ylim(0, None)
ax.set_xlabel("distribution of the tensor")
ax.set_ylabel("relative Frobenius error")
ax.set_title("Quantization error by format (linear axis from 0; lower is better)")
ax.legend(title="format (block, scale)", fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. The 128x4 swizzled scale layout
#
# Kernels do not read scales row by row. CUTLASS, cuBLAS and TRT-LLM pad the `[M, K/16]` scale
# matrix to multiples of (128, 4) and store each 128x4 tile as a 512-byte atom in which row
# `r = 32*b + c` and column `e` sit at byte `16*c + 4*b + e`. Passing linear scales where swizzled
# ones are expected is one of the silent-garbage failure classes notebook 03 plants and detects.

# %%
m, kb = 256, 8
index = torch.arange(m * kb).reshape(m, kb)
position = torch.empty(m * kb, dtype=torch.long)
position[swizzle_scales_128x4(index).reshape(-1)] = torch.arange(m * kb)
where = position.reshape(m, kb)

# %%
# NBVAL_CHECK_OUTPUT
for r, c in [(0, 0), (0, 1), (1, 0), (32, 0), (127, 3), (0, 4), (128, 0)]:
    print(f"scale (row {r:3d}, block {c}) -> byte {int(where[r, c]):5d}")

# %%
fig, ax = plt.subplots(figsize=(9, 3))
im = ax.imshow(where.T.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
ax.set_xlabel("row m of the weight")
ax.set_ylabel("scale column (K/16)")
ax.set_title("byte offset of each scale in the 128x4 swizzled layout")
fig.colorbar(im, ax=ax, label="byte offset in the swizzled buffer")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. One block by hand
#
# Sixteen values, the tensor scale fixed to `gs = 448*6/amax` of this block alone (so its SF is
# 448), and every intermediate printed: block amax, SF, the per-element scale `1/(SF/gs)`, the
# scaled values, their codes, the packed bytes (element 2i in the low nibble) and the decoded
# values.

# %%
gx = torch.Generator().manual_seed(example_seed)
x = (torch.randn(1, 16, generator=gx) * 0.05).to(torch.bfloat16).float()
q = quantize_nvfp4(x)
gs = float(q.global_scale)
sf = float(q.scale.float()[0, 0])
scaled = x[0] * (1.0 / (sf / gs))
codes = q.codes()[0]
decoded = dequantize_nvfp4(q)[0]

# %%
# NBVAL_CHECK_OUTPUT
print(f"block amax = {x.abs().max().item():.6g}; gs = 448*6/amax = {gs:.6g}; SF = e4m3(gs*amax/6) = {sf:g}")
df = pd.DataFrame({"x": x[0].numpy(), "x*gs/SF": scaled.numpy(), "code": [f"0x{int(c):X}" for c in codes],
                   "e2m1": e2m1_decode(codes).numpy(), "decoded": decoded.numpy()})
print(df.to_string(float_format=lambda v: f"{v:.5g}"))
print("packed bytes:", " ".join(f"{int(b):02X}" for b in q.data[0]))
print(f"block relative error: {float((decoded - x[0]).norm() / x[0].norm()):.4f}")

# %%
_ = results.record("01_nvfp4_math", {
    "relative_error": {f"{r['format']} | {r['distribution']}": r["relative_error"] for r in table.to_dict("records")},
    "tensor_scale_error": {"with_gs": scale_effect["with_gs"], "gs_1": scale_effect["gs_1"]},
    "cuda_matches_cpu": same_on_gpu,
})
