"""Token sorting by expert with padding to the GEMM block size: multi-CTA, at most two Triton launches.

Slots are the S = T*k (token, choice) pairs, slot = t*k + j, e(slot) = topk_ids.flat[slot]. Output
(the layout of vLLM's ``moe_align_block_size``, reimplemented):

- ``sorted_ids`` [max_rows] int32: slot ids grouped by expert, each expert's group padded to a
  multiple of ``BLOCK_M`` with the sentinel ``num_slots``;
- ``block_expert`` [max_blocks] int32: the expert of each BLOCK_M-row block, -1 past the end.

``max_rows = S + min(E, S) * (BLOCK_M - 1)`` rounded up to BLOCK_M bounds the padded length with
no host synchronisation (at most min(E, S) experts receive slots). With

    cnt[e]   = #{slot : e(slot) = e}                    padded[e] = ceil(cnt[e] / BLOCK_M) * BLOCK_M
    start[e] = sum_{e' < e} padded[e']                  end[e]    = start[e] + padded[e]
    rank(s)  = #{s' : e(s') = e(s), s' placed before s} (a permutation of 0..cnt[e]-1 per expert)

the result is ``sorted_ids[start[e(s)] + rank(s)] = s``, ``sorted_ids[r] = S`` for every other row
r (``start[e] + cnt[e] <= r < end[e]``, and ``r >= end[E-1]``), and ``block_expert[b]`` = the
smallest e with ``end[e] / BLOCK_M > b`` (an expert with cnt > 0), -1 when there is none.

Kernels (no host synchronisation, every shape a function of (S, E, BLOCK_M) only):

1. :func:`moe_sort_count_kernel`, many programs, CHUNK slots each: inside a chunk, the slots of one
   expert find their local rank and the chunk count by an all-pairs [CHUNK, CHUNK] compare; one
   leader per (chunk, expert) takes ``base = atomic_add(counts[e], chunk_count)``, so
   ``rank(s) = base + local_rank(s)`` (stored per slot) and the atomics per address are at most
   S / CHUNK (a single hot expert does not serialise S atomics). Every program then takes a ticket
   ``atomic_add(done, 1)``; the last one computes ``start``, ``end / BLOCK_M`` and
   ``fill = start + cnt`` (one [E] cumsum). ``counts`` and ``done`` are zeroed by a memset.
2. :func:`moe_sort_place_kernel`, many programs: slots ``sorted_ids[start[e] + rank] = s`` (plain
   stores, no atomics), and blocks: ``block_expert[b] = #{e : end[e] / BLOCK_M <= b}`` (-1 when
   that is E) by a 16-ary search over the non-decreasing ``end / BLOCK_M`` (3 dependent loads for
   E <= 4096, O(log E) per block instead of the O(E) compare), then the sentinel on the rows of
   block b at or past ``fill[block_expert[b]]`` (all of them when it is -1). Slot rows and sentinel
   rows are disjoint, so both halves run in parallel.

Launches: S > SINGLE_MAX_SLOTS: a memset of E_POW2 + 16 ints and the two kernels. Otherwise one
program does everything in one launch (``SINGLE``: it zeroes its own counts, then runs the place
kernel's pieces in a loop): the decode path pays one launch and no memset.

Ids outside ``[0, E)`` (issue 32): such a slot is no expert's: it gets no count and no rank and is placed
in no block; each count chunk that holds any adds their number to the ``id_errors`` counter with one
atomic, and with ``zero_rows`` the place pieces that hold any zero those slots' rows (the per-slot w2
output the GEMM never writes for them, so the k-sum adds 0). No host synchronisation.

The order of slots inside an expert depends on the order of the atomics between chunks (inside a
chunk it follows the slot id); the GEMM computes every row independently, so results do not depend
on it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SINGLE_MAX_SLOTS = 128  # up to this many slots (one count chunk): one program, one launch (<= the cap)
SINGLE_MAX_SLOTS_CAP = 1024  # slots placed per loop step of the one-program path
COUNT_CHUNK = 128  # slots per program of the count kernel ([CHUNK, CHUNK] all-pairs compare)
PLACE_CHUNK = 512  # slots per program of the place kernel
PLACE_ROWS = 512  # sorted rows (BLOCK_M-row blocks) per program of the place kernel
SINGLE_ROWS = 4096  # sorted rows per loop step of the one-program path (at most 256 blocks)
FAN = tl.constexpr(16)  # fan-out of the block -> expert search


@triton.jit
def _rank_chunk(ids_ptr, rank_ptr, counts_ptr, err_ptr, s0, num_slots, num_experts, CHUNK: tl.constexpr):
    """rank[s] = atomic_add(counts[e], #slots of e in the chunk) (leader) + #{s' < s in chunk: e(s') = e(s)}.

    An id outside [0, E) is no expert (no count, no rank); the chunk adds their number to ``err_ptr``."""
    i = tl.arange(0, CHUNK)
    offs = s0 + i
    m = offs < num_slots
    e = tl.load(ids_ptr + offs, mask=m, other=0)
    ok = m & (e >= 0) & (e < num_experts)  # compared before the int32 cast (an int64 id of 2**32 is out)
    n_bad = tl.sum((m & ~ok).to(tl.int32), axis=0)
    tl.atomic_add(err_ptr, n_bad, mask=n_bad > 0)
    m = ok
    e = tl.where(m, e.to(tl.int32), -1)
    same = (e[:, None] == e[None, :]) & m[:, None]
    local = tl.sum((same & (i[None, :] < i[:, None])).to(tl.int32), axis=1)
    cnt = tl.sum(same.to(tl.int32), axis=1)
    lead = m & (local == 0)
    base = tl.atomic_add(counts_ptr + tl.where(lead, e, 0), cnt, mask=lead)
    base = tl.where(lead, base, 0)
    base = tl.sum(tl.where(same & lead[None, :], base[None, :], 0), axis=1)
    tl.store(rank_ptr + offs, base + local, mask=m)


@triton.jit
def _bounds(counts_ptr, start_ptr, bend_ptr, fill_ptr, num_experts, BLOCK_M: tl.constexpr,
            E_POW2: tl.constexpr):
    """start = exclusive cumsum of padded counts; bend = end / BLOCK_M; fill = start + cnt."""
    offs_e = tl.arange(0, E_POW2)
    e_mask = offs_e < num_experts
    cnt = tl.load(counts_ptr + offs_e, mask=e_mask, other=0, cache_modifier=".cg")
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    end = tl.cumsum(padded, 0)
    start = end - padded
    tl.store(start_ptr + offs_e, start, mask=e_mask)
    tl.store(bend_ptr + offs_e, end // BLOCK_M, mask=e_mask)
    tl.store(fill_ptr + offs_e, start + cnt, mask=e_mask)


@triton.jit
def _count_le(bend_ptr, b, mb, num_experts, BB: tl.constexpr, STEPS: tl.constexpr):
    """#{e < E : bend[e] <= b} per query b, bend non-decreasing: a FAN-ary search, STEPS dependent loads.

    Invariant: the answer lies in [lo, lo + FAN * st]; a step counts the FAN sub-ranges of width st whose
    last entry bend[lo + j*st - 1] <= b (a prefix) and moves lo past them. FAN^STEPS >= E suffices."""
    j = tl.arange(0, FAN) + 1
    lo = tl.zeros((BB,), tl.int32)
    st = 1
    for _ in tl.static_range(STEPS - 1):
        st = st * FAN
    for _ in tl.static_range(STEPS):
        idx = lo[:, None] + j[None, :] * st - 1
        ok = (idx < num_experts) & mb[:, None]
        v = tl.load(bend_ptr + idx, mask=ok, other=0)
        lo = lo + tl.sum((ok & (v <= b[:, None])).to(tl.int32), axis=1) * st
        st = st // FAN
    return lo


@triton.jit
def _zero_bad_rows(ids_ptr, zero_ptr, p, num_slots, num_experts, zero_cols, stride_z, CHUNK: tl.constexpr,
                   ZB: tl.constexpr):
    """Piece p: zero row s of ``zero_ptr`` (``zero_cols`` wide) for every slot s in [p*CHUNK, (p+1)*CHUNK)
    whose id is outside [0, E): the row the GEMM never writes for a dropped slot (the k-sum then adds 0).
    One vector test per piece; the rows are written, one slot at a time, only by a piece that has one."""
    offs = p * CHUNK + tl.arange(0, CHUNK)
    m = offs < num_slots
    e = tl.load(ids_ptr + offs, mask=m, other=0)
    if tl.sum((m & ((e < 0) | (e >= num_experts))).to(tl.int32), axis=0) > 0:
        for s in range(p * CHUNK, tl.minimum(p * CHUNK + CHUNK, num_slots)):
            e1 = tl.load(ids_ptr + s)
            if (e1 < 0) | (e1 >= num_experts):
                for c0 in range(0, zero_cols, ZB):
                    cols = c0 + tl.arange(0, ZB)
                    tl.store(zero_ptr + (s + tl.zeros((ZB,), tl.int64)) * stride_z + cols,
                             tl.zeros((ZB,), zero_ptr.dtype.element_ty), mask=cols < zero_cols)


@triton.jit
def _place(ids_ptr, rank_ptr, start_ptr, bend_ptr, fill_ptr, sorted_ids_ptr, block_expert_ptr, p,
           num_slots, num_experts, max_blocks, BLOCK_M: tl.constexpr, CHUNK: tl.constexpr,
           BB: tl.constexpr, STEPS: tl.constexpr):
    """Piece p: slots [p*CHUNK, (p+1)*CHUNK) to start[e] + rank; blocks [p*BB, (p+1)*BB): expert + sentinel.

    A slot whose id is outside [0, E) is dropped (placed nowhere)."""
    offs = p * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + offs, mask=offs < num_slots, other=0)
    m = (offs < num_slots) & (e >= 0) & (e < num_experts)
    e = e.to(tl.int32)
    r = tl.load(rank_ptr + offs, mask=m, other=0)
    st = tl.load(start_ptr + e, mask=m, other=0)
    tl.store(sorted_ids_ptr + st + r, offs, mask=m)

    b = p * BB + tl.arange(0, BB)
    mb = b < max_blocks
    lo = _count_le(bend_ptr, b, mb, num_experts, BB, STEPS)
    ex = tl.where(lo < num_experts, lo, -1)
    tl.store(block_expert_ptr + b, ex, mask=mb)
    f = tl.load(fill_ptr + ex, mask=mb & (ex >= 0), other=0)
    rows = b[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
    pad = (ex[:, None] < 0) | (rows >= f[:, None])
    tl.store(sorted_ids_ptr + rows, tl.zeros((BB, BLOCK_M), tl.int32) + num_slots, mask=mb[:, None] & pad)


@triton.jit
def moe_sort_count_kernel(topk_ids_ptr, rank_ptr, counts_ptr, done_ptr, start_ptr, bend_ptr, fill_ptr,
                          sorted_ids_ptr, block_expert_ptr, num_slots, num_experts, max_blocks, n_place,
                          err_ptr, zero_ptr, zero_cols, stride_z,
                          BLOCK_M: tl.constexpr, E_POW2: tl.constexpr, CHUNK: tl.constexpr,
                          PCHUNK: tl.constexpr, BB: tl.constexpr, STEPS: tl.constexpr,
                          SINGLE: tl.constexpr, ZERO: tl.constexpr = False):
    """Per-slot rank within its expert and, in the last program, start / end / fill per expert.

    SINGLE (grid 1): zero counts first, then also run the n_place pieces of the place kernel.
    ``err_ptr``: int32 counter the out-of-range ids are added to (one atomic per chunk that has one)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    if SINGLE:
        offs_e = tl.arange(0, E_POW2)
        tl.store(counts_ptr + offs_e, tl.zeros((E_POW2,), tl.int32), mask=offs_e < num_experts)
        tl.debug_barrier()
    for s0 in range(pid * CHUNK, num_slots, nprog * CHUNK):
        _rank_chunk(topk_ids_ptr, rank_ptr, counts_ptr, err_ptr, s0, num_slots, num_experts, CHUNK)
    tl.debug_barrier()
    if SINGLE:
        _bounds(counts_ptr, start_ptr, bend_ptr, fill_ptr, num_experts, BLOCK_M, E_POW2)
        tl.debug_barrier()
        for p in range(0, n_place):
            _place(topk_ids_ptr, rank_ptr, start_ptr, bend_ptr, fill_ptr, sorted_ids_ptr, block_expert_ptr, p,
                   num_slots, num_experts, max_blocks, BLOCK_M, PCHUNK, BB, STEPS)
        if ZERO:
            for p in range(0, tl.cdiv(num_slots, PCHUNK)):
                _zero_bad_rows(topk_ids_ptr, zero_ptr, p, num_slots, num_experts, zero_cols, stride_z, PCHUNK, 64)
    else:
        ticket = tl.atomic_add(done_ptr, 1)
        if ticket == nprog - 1:  # every other program's counts atomics have completed
            _bounds(counts_ptr, start_ptr, bend_ptr, fill_ptr, num_experts, BLOCK_M, E_POW2)


@triton.jit
def moe_sort_place_kernel(topk_ids_ptr, rank_ptr, start_ptr, bend_ptr, fill_ptr, sorted_ids_ptr,
                          block_expert_ptr, num_slots, num_experts, max_blocks, zero_ptr, zero_cols, stride_z,
                          BLOCK_M: tl.constexpr, PCHUNK: tl.constexpr, BB: tl.constexpr,
                          STEPS: tl.constexpr, ZERO: tl.constexpr = False):
    """Program p: piece p of the output (see :func:`_place`); grid max(cdiv(S, PCHUNK), cdiv(max_blocks, BB))."""
    _place(topk_ids_ptr, rank_ptr, start_ptr, bend_ptr, fill_ptr, sorted_ids_ptr, block_expert_ptr,
           tl.program_id(0), num_slots, num_experts, max_blocks, BLOCK_M, PCHUNK, BB, STEPS)
    if ZERO:
        _zero_bad_rows(topk_ids_ptr, zero_ptr, tl.program_id(0), num_slots, num_experts, zero_cols, stride_z, PCHUNK,
                       64)


def padded_bounds(num_slots: int, num_experts: int, block_m: int) -> tuple[int, int]:
    """(max_rows, max_blocks): host-side upper bound of the padded sorted length."""
    rows = num_slots + min(num_experts, num_slots) * (block_m - 1)
    blocks = triton.cdiv(rows, block_m)
    return blocks * block_m, blocks


def sort_constexprs(num_experts: int, block_m: int, single: bool, zero: bool = False) -> dict:
    """Constexprs of :func:`moe_sort_count_kernel` for (E, BLOCK_M, SINGLE, ZERO); the place kernel takes the
    BLOCK_M, PCHUNK, BB, STEPS, ZERO of ``single=False``. ``zero``: the dropped slots' rows of ``zero_rows``
    are zeroed (:func:`moe_sort`).

    E_POW2 = max(16, 2^ceil(log2 E)); STEPS = ceil(log_FAN(E_POW2)) search steps; a place piece covers
    PCHUNK slots and BB = max(1, rows / BLOCK_M) blocks, rows = PLACE_ROWS (grid) or SINGLE_ROWS (the
    one-program loop), at most 256 blocks (the [BB, FAN] search tile)."""
    e_pow2 = max(16, triton.next_power_of_2(num_experts))
    steps = (e_pow2.bit_length() - 1 + 3) // 4  # FAN = 16 = 2^4
    if single:
        pchunk, bb = SINGLE_MAX_SLOTS_CAP, max(1, min(256, SINGLE_ROWS // block_m))
    else:
        pchunk, bb = PLACE_CHUNK, max(1, min(256, PLACE_ROWS // block_m))
    return {"BLOCK_M": block_m, "E_POW2": e_pow2, "CHUNK": COUNT_CHUNK, "PCHUNK": pchunk, "BB": bb,
            "STEPS": steps, "SINGLE": single, "ZERO": zero}


def moe_sort(topk_ids: torch.Tensor, num_experts: int, block_m: int, *, id_errors: torch.Tensor | None = None,
             zero_rows: torch.Tensor | None = None):
    """topk_ids [T, k] (int) -> (sorted_ids [max_rows] int32, block_expert [max_blocks] int32).

    See the module docstring. ``block_m`` must be a power of two (the GEMM's BLOCK_M).
    Launches: S <= SINGLE_MAX_SLOTS: one kernel; else a memset of E_POW2 + 16 ints and two kernels.

    Ids outside [0, E) (issue 32): such a slot is dropped (in no expert block); their number is added to
    ``id_errors`` (int32, one element, on the ids' device; None: a scratch int nobody reads), and with
    ``zero_rows`` (a [S, C] tensor with unit column stride: the per-slot output of the w2 GEMM) the
    dropped slots' rows are zeroed, so a k-sum over the slots adds 0 for them. No host sync either way.
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
    single = s <= min(SINGLE_MAX_SLOTS, SINGLE_MAX_SLOTS_CAP)
    ce = sort_constexprs(num_experts, block_m, single, zero_rows is not None)
    ep = ce["E_POW2"]  # scratch stride: every slice stays 16-byte aligned
    n_place = max(triton.cdiv(s, ce["PCHUNK"]), triton.cdiv(max_blocks, ce["BB"]))
    # [counts (ep) | done (16)], zeroed unless single (the kernel zeroes counts), then start, bend, fill, rank
    scratch = torch.empty(4 * ep + 16 + s, dtype=torch.int32, device=dev)
    if not single:
        scratch[:ep + 16].zero_()
    counts, done = scratch[:ep], scratch[ep:ep + 1]
    start, bend, fill = (scratch[ep + 16 + i * ep:2 * ep + 16 + i * ep] for i in range(3))
    rank = scratch[4 * ep + 16:]
    err = scratch[ep + 1:ep + 2] if id_errors is None else id_errors  # a sink past `done` nobody reads
    if zero_rows is not None:
        if zero_rows.dim() != 2 or zero_rows.shape[0] != s or zero_rows.stride(1) != 1:
            raise ValueError(f"zero_rows must be [S={s}, C] with unit column stride, got {tuple(zero_rows.shape)}")
        zero = (zero_rows, zero_rows.shape[1], zero_rows.stride(0))
    else:
        zero = (err, 0, 0)
    grid1 = 1 if single else triton.cdiv(s, ce["CHUNK"])
    moe_sort_count_kernel[(grid1,)](ids, rank, counts, done, start, bend, fill, sorted_ids, block_expert,
                                    s, num_experts, max_blocks, n_place, err, *zero, **ce, num_warps=4)
    if not single:
        moe_sort_place_kernel[(n_place,)](ids, rank, start, bend, fill, sorted_ids, block_expert,
                                          s, num_experts, max_blocks, *zero, BLOCK_M=block_m, PCHUNK=ce["PCHUNK"],
                                          BB=ce["BB"], STEPS=ce["STEPS"], ZERO=ce["ZERO"], num_warps=4)
    return sorted_ids, block_expert
