"""Facts read from the real upstream wheels (vLLM, FlashInfer, torch, ...), one record per dist-version.

The records live in ``data/upstream/`` and are written by ``sm120lab upstream record DIST VERSION``
(``record-all`` for the whole set); reading them needs no network::

    from sm120lab import upstream
    upstream.versions("vllm")                      # ['0.17.0', ..., '0.34.0']
    rec = upstream.load("vllm", upstream.newest("vllm"))
    rec.pins["flashinfer-python"]                  # '==0.7.3'
    [b.name for b in rec.moe_backends if b.sm12x == "accepts"]
    rec.source_url(rec.env_vars["VLLM_USE_V1"])    # https://github.com/vllm-project/vllm/blob/v.../vllm/envs.py#L..
    upstream.changes("vllm", fact="moe_backends")  # releases where that fact changed
    upstream.check_install(["vllm==0.33.0", "flashinfer-python==0.7.2.post1"]).ok

See ``notes/upstream.md`` for what is read, how, and from which file.
"""

from __future__ import annotations

from typing import Any

from .record import (
    Anchor,
    ArchListResult,
    BaseRecord,
    FlagFact,
    FlashInferRecord,
    JitLoadOrder,
    MetadataRecord,
    MoeBackendFact,
    TextFact,
    TorchRecord,
    Verdict,
    VllmRecord,
)
from .resolve import ResolveResult, check_install
from .store import index, load, versions

__all__ = ["Anchor", "ArchListResult", "BaseRecord", "FlagFact", "FlashInferRecord", "JitLoadOrder",
           "MetadataRecord", "MoeBackendFact", "ResolveResult", "TextFact", "TorchRecord", "Verdict", "VllmRecord", "changes",
           "check_install", "comparable", "index", "load", "newest", "unavailable", "versions"]


def newest(dist: str) -> str:
    """The newest recorded version of ``dist`` (ValueError when none is recorded)."""
    have = versions(dist)
    if not have:
        raise ValueError(f"{dist}: no recorded facts; record them with `sm120lab upstream record {dist} VERSION`")
    return have[-1]


def _strip_anchors(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"file", "line", "text"}:
            return None
        return {k: _strip_anchors(v) for k, v in value.items() if k != "anchor" and not k.endswith("_anchor")
                and k not in ("sm12x_note",)}
    if isinstance(value, list):
        return [_strip_anchors(v) for v in value]
    return value


def _moe_sm12x(rec: VllmRecord) -> dict:
    return {b.name: [b.sm12x.value, b.sm121.value, b.auto_order] for b in rec.moe_backends if "nvfp4" in b.formats}


def _sm12x(rec: VllmRecord) -> dict:
    out = {"moe_sm12x": _moe_sm12x(rec),
           "pins": {k: rec.pins.get(k) for k in ("flashinfer-python", "torch")}}
    for name in ("dense_nvfp4_gemm", "attention_priority_cuda", "facts"):
        out[name] = _strip_anchors(rec.model_dump(mode="json")[name])
    return out


#: Facts derived from several fields: ``moe_sm12x`` (per NVFP4 MoE backend: SM120 and SM121 verdicts and
#: auto-selection position) and ``sm12x`` (that, the flashinfer-python/torch pins, the dense NVFP4 GEMM
#: knob, the SM120 attention order and the anchored facts).
DERIVED = {"moe_sm12x": _moe_sm12x, "sm12x": _sm12x}


def comparable(record: BaseRecord, fact: str) -> Any:
    """The value of one fact of a record with every source anchor (file, line, text) removed, so that two
    releases compare equal when only line numbers moved (``env_vars`` compares as its set of names).
    ``fact`` is a record field or one of :data:`DERIVED` (vLLM records)."""
    if fact in DERIVED and isinstance(record, VllmRecord):
        return DERIVED[fact](record)
    if fact not in type(record).model_fields:
        raise ValueError(f"fact: expected one of {sorted([*type(record).model_fields, *DERIVED])}, got {fact!r}")
    return _strip_anchors(record.model_dump(mode="json")[fact])


def changes(dist: str, fact: str) -> list[str]:
    """The recorded versions of ``dist`` whose ``fact`` (``moe_backends``, ``env_vars``, ``serve_flags``,
    ``pins``, any other record field, or a derived fact: ``moe_sm12x``, ``sm12x``) differs from the previous recorded version's, anchors ignored.
    The first recorded version is not listed."""
    have = versions(dist)
    out = []
    prev = None
    for i, v in enumerate(have):
        cur = comparable(load(dist, v), fact)
        if i and cur != prev:
            out.append(v)
        prev = cur
    return out


def unavailable() -> list:
    """Versions some recorded release pins exactly that PyPI did not serve when recording."""
    return list(index().unavailable)
