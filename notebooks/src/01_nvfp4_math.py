# %% [markdown]
# # 01 · NVFP4, exactly
#
# Every later notebook (correctness diffs, kernels, tok/s) measures against the reference in
# `sm120lab.nvfp4`. This one shows what that reference computes, bit by bit:
#
# 1. the E2M1 element grid and the E4M3 scale grid;
# 2. why NVFP4 uses 16-element blocks **and** a per-tensor FP32 scale;
# 3. how much error NVFP4 costs against MXFP4, INT4 group-wise and FP8 on weight-like and
#    activation-like data;
# 4. the 128x4 swizzled scale layout that CUTLASS / cuBLAS / TRT-LLM kernels read;
# 5. one 16-element block quantized by hand.
#
# Runs on a CPU in a few seconds. The formulas are in the docstrings of
# `sm120lab/nvfp4/quantize.py`; the unit tests (`tests/test_nvfp4_*.py`) check them against
# `ml_dtypes` and torch's own FP8 cast.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from sm120lab import results
from sm120lab.nvfp4 import (E2M1_VALUES, dequantize_nvfp4, e2m1_decode, e2m1_encode, quantize_nvfp4,
                            swizzle_scales_128x4)
from sm120lab.quant_error import error_table, sample_distribution

# %% tags=["parameters"]
seed = 0
rows = 256
cols = 2048
distributions = ["gaussian", "student_t", "outlier_channels"]
example_seed = 7

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
fig, axes = plt.subplots(1, 2, figsize=(11, 2.6))
v = np.array(E2M1_VALUES)
axes[0].scatter(v, np.zeros_like(v), c=np.sign(v + 1e-9), cmap="coolwarm", s=60, zorder=3)
for c, val in enumerate(E2M1_VALUES):
    if c in (0, 8):
        continue
    axes[0].annotate(f"{c:X}", (val, 0), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
axes[0].set_yticks([]); axes[0].set_title("E2M1 values (labels: 4-bit code)"); axes[0].grid(axis="x", alpha=.3)
axes[1].scatter(pos.numpy(), np.zeros(pos.numel()), s=8, marker="|")
axes[1].set_xscale("log", base=2); axes[1].set_yticks([])
axes[1].set_title("E4M3 positive values (block scales)"); axes[1].grid(axis="x", alpha=.3)
plt.tight_layout(); plt.show()

# %% [markdown]
# ## 2. Why 16-element blocks plus a tensor scale
#
# One E2M1 code has a dynamic range of 12 (0.5 to 6). Each 16-element block gets its own E4M3
# scale `SF = e4m3(gs * amax_block / 6)`, so the block's largest element lands near ±6. E4M3 covers
# 2^-9..448, but only if the numbers are moved into that window first: the FP32 tensor scale
# `gs = 448*6/amax` maps the tensor's largest block onto SF = 448 exactly. Without it, small
# tensors (weights are ~1e-2, their blocks' amax/6 ~1e-3) fall into E4M3's subnormal range where
# scales are coarse, or to zero.

# %%
g = torch.Generator().manual_seed(seed)
w = sample_distribution("gaussian", (rows, cols), g) * 1e-2   # small weights, amax ~1e-3
err_with = float((dequantize_nvfp4(quantize_nvfp4(w)) - w).norm() / w.norm())
err_without = float((dequantize_nvfp4(quantize_nvfp4(w, 1.0)) - w).norm() / w.norm())
zero_blocks = int((quantize_nvfp4(w, 1.0).scale.float() == 0).sum())

# %%
# NBVAL_IGNORE_OUTPUT
print(f"amax = {w.abs().max():.3e}; relative error with gs = 448*6/amax: {err_with:.4f}; "
      f"with gs = 1: {err_without:.4f} ({zero_blocks} of {w.numel() // 16} blocks got scale 0)")

# %%
# NBVAL_CHECK_OUTPUT
print("tensor scale needed (gs=1 loses more than 2x the accuracy):", err_without > 2 * err_with)

# %% [markdown]
# ## 3. Error against other 4-bit and 8-bit formats
#
# Same tensors for every format: Gaussian weights, heavy-tailed Student-t (ν=3) values, and
# activations with 1% outlier channels (x50). Bits per element include the scales.

# %%
table = pd.DataFrame(error_table(distributions, (rows, cols), seed))
pivot = table.pivot(index="format", columns="distribution", values="relative_error")

# %%
# NBVAL_IGNORE_OUTPUT
print(pivot.round(4).to_string())

# %%
# NBVAL_CHECK_OUTPUT
best4 = pivot.drop(index="FP8 E4M3 (tensor)").idxmin()
print("lowest-error 4-bit format per distribution:")
print(best4.to_string())

# %%
ax = pivot.T.plot.bar(figsize=(9, 3.2), rot=0, logy=True)
ax.set_ylabel("relative Frobenius error"); ax.set_title("Quantization error by format (lower is better)")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## 4. The 128x4 swizzled scale layout
#
# Kernels do not read scales row by row. CUTLASS, cuBLAS and TRT-LLM pad the `[M, K/16]` scale
# matrix to multiples of (128, 4) and store each 128x4 tile as a 512-byte atom in which row
# `r = 32*b + c` and column `e` sit at byte `16*c + 4*b + e`. Passing linear scales where swizzled
# ones are expected is one of the silent-garbage failure modes notebook 03 reproduces.

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
im = ax.imshow(where[:, :].T.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
ax.set_xlabel("row m"); ax.set_ylabel("scale column (K/16)")
ax.set_title("byte offset of each scale in the 128x4 swizzled layout")
fig.colorbar(im, ax=ax); plt.tight_layout(); plt.show()

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
results.record("01_nvfp4_math", {
    "relative_error": {f"{r['format']} | {r['distribution']}": r["relative_error"] for r in table.to_dict("records")},
    "tensor_scale_error": {"with_gs": err_with, "gs_1": err_without},
})
