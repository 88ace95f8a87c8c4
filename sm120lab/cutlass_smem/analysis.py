"""Derived numbers from the recorded kernel sizes, and CUTLASS's stage-count formula redone in Python.

Kernel storage (CUTLASS ``sm90_gemm_array_tma_warpspecialized_cooperative.hpp``, used by the
SM120 grouped kernel; 4.2.1 l.178-207, 4.5.0 l.197-226)::

    SharedStorage { tensors {mainloop, epilogue} (alignas 1024 via smem_A/smem_B);
                    pipelines (16); scheduler_response[] (16); tensormaps (128) }

so ``sizeof(SharedStorage)`` is a multiple of 1024 (``kernel_align``). ``padding`` below is
``sizeof(SharedStorage)`` minus the bytes of its parts: what the alignment adds.

Stage count (``StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>`` from
FlashInfer's moe_gemm_tma_ws_launcher.inl, 0.6.5 l.435-437), computed by
``sm100_compute_stage_count_or_override_blockscaled`` (sm100_blockscaled_umma_builder.inl
l.70-87) called from sm120_blockscaled_mma_builder.inl::

    stages = (Capacity - carveout) // (A + B + SFA + SFB + pipeline_bytes)   # per stage
    CUTLASS 4.2.1: Capacity = 101376, pipeline_bytes = 16
    CUTLASS 4.5.0: Capacity = 101376 - 128 (scheduler pipeline) - 256 (2 tensormaps)
                              - 48 (tensormap-ready pipeline), pipeline_bytes = round_up(16, 128)

Neither version counts the kernel-level alignment padding.
"""

from __future__ import annotations

from packaging.version import Version

from ..constants import SM120_SMEM_LIMIT

FUSIONS = {0: "NONE", 1: "ACTIVATION", 2: "GATED_ACTIVATION", 3: "FINALIZE"}  # moe_gemm_kernels.h l.176


def dtype_label(type_name: str) -> str:
    t = type_name.lower()
    if "fp4" in t or "e2m1" in t:
        return "nvfp4"
    if "fp8" in t or "e4m3" in t:
        return "fp8"
    if "bfloat16" in t:
        return "bf16"
    if "half" in t:
        return "f16"
    return type_name


def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def per_stage_bytes(r: dict) -> int:
    """Mainloop tensor bytes per stage (A + B + SFA + SFB), from the recorded cosizes."""
    return (r["smem_a"] + r["smem_b"] + r["smem_sfa"] + r["smem_sfb"]) // r["stages"]


def derive(r: dict) -> dict:
    """One record plus: labels, per-stage bytes, parts, padding, overflow."""
    parts = r["mainloop_tensors"] + r["epilogue_tensors"] + r["pipelines"] + r["scheduler_response"] + r["tensormaps"]
    d = dict(r)
    d.update(
        act_type=dtype_label(r["act"]), weight_type=dtype_label(r["weight"]), out_type=dtype_label(r["out"]),
        epilogue=FUSIONS.get(r["fusion"], str(r["fusion"])),
        tile=f"{r['tile_m']}x{r['tile_n']}x{r['tile_k']}",
        stage_bytes=per_stage_bytes(r),
        other_bytes=r["pipelines"] + r["scheduler_response"] + r["tensormaps"],
        parts_bytes=parts,
        padding=r["kernel_smem"] - parts,
        over_by=r["kernel_smem"] - r["capacity"],
        fits=r["kernel_smem"] <= r["capacity"],
    )
    return d


def cutlass_stage_count(r: dict, cutlass_version: str) -> int:
    """CUTLASS's automatic stage count for this record's tile, redone from the recorded sizes."""
    per_stage_tensors = per_stage_bytes(r)
    if Version(cutlass_version).release[:2] >= (4, 5):
        capacity = SM120_SMEM_LIMIT - 128 - 256 - 48
        pipeline = 128
    else:
        capacity = SM120_SMEM_LIMIT
        pipeline = 16
    return (capacity - r["epilogue_shared"]) // (per_stage_tensors + pipeline)


def model_kernel_smem(r: dict) -> int:
    """sizeof(GemmKernel::SharedStorage) rebuilt from its parts with C++ layout rules."""
    off = round_up(r["mainloop_tensors"] + r["epilogue_tensors"], 1024)  # tensors (alignas 1024)
    off = round_up(off, 16) + r["pipelines"]
    off = round_up(off, 16) + r["scheduler_response"]
    off = round_up(off, 128) + r["tensormaps"]
    return round_up(off, r["kernel_align"])


def configs(result: dict, *, dedupe_output_type: bool = True) -> list[dict]:
    """Derived records of one result, sorted; f16/bf16 outputs merged when their sizes agree."""
    rows = [derive(r) for r in result["records"]]
    rows.sort(key=lambda d: (d["act_type"], d["tile_m"], d["tile_n"], d["tile_k"], d["fusion"], -d["swap_ab"], d["out_type"]))
    if not dedupe_output_type:
        return rows
    seen: dict[tuple, dict] = {}
    for d in rows:
        key = (d["act_type"], d["tile"], d["epilogue"], d["swap_ab"])
        if key in seen:
            if seen[key]["kernel_smem"] != d["kernel_smem"] or seen[key]["stages"] != d["stages"]:
                raise ValueError(f"output types differ in size for {key}; use dedupe_output_type=False")
            seen[key]["out_type"] += "," + d["out_type"]
        else:
            seen[key] = dict(d)
    return list(seen.values())


def format_table(result: dict) -> str:
    """Plain-text table of one result (one row per config; f16/bf16 merged)."""
    head = (f"FlashInfer {result['flashinfer_version']} (CUTLASS {result['cutlass_version']})"
            f"{' + stage-count patch' if result['patched'] else ''}: limit {SM120_SMEM_LIMIT:,} B")
    cols = f"{'act':5} {'tile':11} {'epilogue':8} {'swap':4} {'st':>2} {'B/stage':>7} {'epi':>6} {'other':>5} " \
           f"{'pad':>5} {'sizeof':>7} {'verdict':>14}"
    lines = [head, cols]
    for d in configs(result):
        verdict = "fits" if d["fits"] else f"OVER by {d['over_by']}"
        lines.append(f"{d['act_type']:5} {d['tile']:11} {d['epilogue']:8} {d['swap_ab']:4d} {d['stages']:2d} "
                     f"{d['stage_bytes']:7d} {d['epilogue_tensors']:6d} {d['other_bytes']:5d} {d['padding']:5d} "
                     f"{d['kernel_smem']:7d} {verdict:>14}")
    n_over = sum(not d["fits"] for d in configs(result, dedupe_output_type=False))
    lines.append(f"{len(result['records'])} kernel types, {n_over} over the limit")
    return "\n".join(lines)


def before_after(before: dict, after: dict) -> list[dict]:
    """Rows joining an unpatched and a patched result of the same version by kernel config."""
    if before["flashinfer_version"] != after["flashinfer_version"] or before["patched"] or not after["patched"]:
        raise ValueError("before_after: expected the unpatched and the patched result of one version")
    key = lambda d: (d["act_type"], d["tile"], d["epilogue"], d["swap_ab"], d["out_type"])
    b = {key(d): d for d in configs(before, dedupe_output_type=False)}
    a = {key(d): d for d in configs(after, dedupe_output_type=False)}
    if b.keys() != a.keys():
        raise ValueError("before_after: the two results cover different kernel configs")
    rows = []
    for k in b:
        rows.append(dict(zip(("act", "tile", "epilogue", "swap_ab", "out"), k),
                         stages_before=b[k]["stages"], smem_before=b[k]["kernel_smem"],
                         stages_after=a[k]["stages"], smem_after=a[k]["kernel_smem"],
                         limit=a[k]["capacity"], fits_before=b[k]["fits"], fits_after=a[k]["fits"]))
    return rows


def overflow_summary(results: list[dict]) -> tuple[dict[str, list[dict]], dict[str, int], dict[str, int]]:
    """The recorded results (:func:`sm120lab.cutlass_smem.recorded`) per FlashInfer version:
    ``(over, kinds, over_after)`` = the unpatched kernel configs over SM120's limit (every output type),
    the number of kernel types, and how many stay over with the stage-count patch."""
    by = {(r["flashinfer_version"], r["patched"]): r for r in results}
    over = {v: [d for d in configs(r, dedupe_output_type=False) if not d["fits"]]
            for (v, patched), r in by.items() if not patched}
    kinds = {v: len(r["records"]) for (v, patched), r in by.items() if not patched}
    over_after = {v: sum(not d["fits"] for d in configs(r, dedupe_output_type=False))
                  for (v, patched), r in by.items() if patched}
    return over, kinds, over_after


def overflow_text(over: dict[str, list[dict]], kinds: dict[str, int], over_after: dict[str, int]) -> str:
    """Per version each overflowing (tile, epilogue, swap-AB) with its arithmetic:
    ``stages x stage bytes + epilogue tensors + other = parts``, aligned to 1024 B, against the limit."""
    lines = []
    for version, rows_over in sorted(over.items()):
        seen = set()
        for d in rows_over:
            key = (d["tile"], d["epilogue"], d["swap_ab"])
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"FlashInfer {version}, NVFP4 {d['tile']} {d['epilogue']} swap_ab={d['swap_ab']}: "
                         f"{d['stages']} x {d['stage_bytes']:,} + {d['epilogue_tensors']:,} + {d['other_bytes']:,} = "
                         f"{d['parts_bytes']:,} B of parts; aligned to 1024 B = {d['kernel_smem']:,} B "
                         f"{'>' if d['kernel_smem'] > SM120_SMEM_LIMIT else '<='} {SM120_SMEM_LIMIT:,} B")
        lines.append(f"   {len(rows_over)} of {kinds[version]} instantiated kernel types (one per tile, epilogue, "
                     f"swap-AB and output type) over the limit; after the stage-count patch: "
                     f"{over_after.get(version, 'not measured')}")
    return "\n".join(lines)
