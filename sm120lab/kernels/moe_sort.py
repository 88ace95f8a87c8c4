"""Token sorting by expert with padding to the GEMM block size, in one Triton launch.

Slots are the T*k (token, choice) pairs, slot = t*k + j. Output (the layout of vLLM's
``moe_align_block_size``, reimplemented):

- ``sorted_ids`` [max_rows] int32: slot ids grouped by expert, each expert's group padded to a
  multiple of ``BLOCK_M`` with the sentinel ``num_slots``;
- ``block_expert`` [max_blocks] int32: the expert of each BLOCK_M-row block, -1 past the end.

``max_rows = S + min(E, S) * (BLOCK_M - 1)`` rounded up to BLOCK_M bounds the padded length with
no host synchronisation (at most min(E, S) experts receive slots). One program (single CTA):
atomic histogram, exclusive cumsum of padded counts, block -> expert by counting ends <= row,
then each slot takes ``pos = atomic_add(cursor[e], 1)``. The order of slots inside an expert is
not deterministic; the GEMM computes every row independently, so results do not depend on it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def moe_sort_kernel(topk_ids_ptr, sorted_ids_ptr, block_expert_ptr, counts_ptr, cursor_ptr,
                    num_slots, num_experts, max_rows, max_blocks,
                    BLOCK_M: tl.constexpr, E_POW2: tl.constexpr, CHUNK: tl.constexpr,
                    BCHUNK: tl.constexpr):
    offs_e = tl.arange(0, E_POW2)
    e_mask = offs_e < num_experts
    tl.store(counts_ptr + offs_e, tl.zeros((E_POW2,), tl.int32), mask=e_mask)
    tl.debug_barrier()
    for s0 in range(0, num_slots, CHUNK):
        offs = s0 + tl.arange(0, CHUNK)
        m = offs < num_slots
        e = tl.load(topk_ids_ptr + offs, mask=m, other=0).to(tl.int32)
        tl.atomic_add(counts_ptr + e, tl.full((CHUNK,), 1, tl.int32), mask=m)
    tl.debug_barrier()
    cnt = tl.load(counts_ptr + offs_e, mask=e_mask, other=0, cache_modifier=".cg")
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    end = tl.cumsum(padded, 0)
    start = end - padded
    total = tl.sum(padded, 0)
    tl.store(cursor_ptr + offs_e, start, mask=e_mask)
    for b0 in range(0, max_blocks, BCHUNK):
        offs_b = b0 + tl.arange(0, BCHUNK)
        row = offs_b * BLOCK_M
        before = (end[None, :] <= row[:, None]) & e_mask[None, :]
        ex = tl.sum(before.to(tl.int32), axis=1)
        ex = tl.where(row < total, ex, -1)
        tl.store(block_expert_ptr + offs_b, ex, mask=offs_b < max_blocks)
    for r0 in range(0, max_rows, CHUNK):
        offs_r = r0 + tl.arange(0, CHUNK)
        tl.store(sorted_ids_ptr + offs_r, tl.full((CHUNK,), 0, tl.int32) + num_slots, mask=offs_r < max_rows)
    tl.debug_barrier()
    for s0 in range(0, num_slots, CHUNK):
        offs = s0 + tl.arange(0, CHUNK)
        m = offs < num_slots
        e = tl.load(topk_ids_ptr + offs, mask=m, other=0).to(tl.int32)
        pos = tl.atomic_add(cursor_ptr + e, tl.full((CHUNK,), 1, tl.int32), mask=m)
        tl.store(sorted_ids_ptr + pos, offs, mask=m)


def padded_bounds(num_slots: int, num_experts: int, block_m: int) -> tuple[int, int]:
    """(max_rows, max_blocks): host-side upper bound of the padded sorted length."""
    rows = num_slots + min(num_experts, num_slots) * (block_m - 1)
    blocks = triton.cdiv(rows, block_m)
    return blocks * block_m, blocks


def moe_sort(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    """topk_ids [T, k] (int) -> (sorted_ids [max_rows] int32, block_expert [max_blocks] int32).

    See the module docstring. ``block_m`` must be a power of two (the GEMM's BLOCK_M).
    """
    if topk_ids.dim() != 2:
        raise ValueError(f"topk_ids must be [T, k], got shape {tuple(topk_ids.shape)}")
    if block_m <= 0 or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two, got {block_m}")
    ids = topk_ids.contiguous()
    s = ids.numel()
    max_rows, max_blocks = padded_bounds(s, num_experts, block_m)
    dev = ids.device
    sorted_ids = torch.empty(max_rows, dtype=torch.int32, device=dev)
    block_expert = torch.empty(max_blocks, dtype=torch.int32, device=dev)
    scratch = torch.empty(2 * num_experts, dtype=torch.int32, device=dev)
    e_pow2 = triton.next_power_of_2(num_experts)
    chunk = 1024 if s > 256 else 128
    bchunk = max(1, min(64, 16384 // e_pow2))
    moe_sort_kernel[(1,)](ids, sorted_ids, block_expert, scratch, scratch[num_experts:],
                          s, num_experts, max_rows, max_blocks,
                          BLOCK_M=block_m, E_POW2=e_pow2, CHUNK=chunk, BCHUNK=bchunk, num_warps=4)
    return sorted_ids, block_expert
