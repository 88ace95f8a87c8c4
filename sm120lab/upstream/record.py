"""The records of facts read from upstream wheels (pydantic v2 models, one JSON file per dist-version).

Every fact that was read from a source file carries an :class:`Anchor` ``(file, line, text)``: the
path inside the wheel, the 1-based line, and the exact source text on that line. A record also says
which wheel it was read from (file name and sha256), the command that wrote it, and how it was read
(``method``). ``schema_version`` is bumped whenever a field changes meaning.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

#: ``https://github.com/<repo>/blob/<tag>/<file>#L<line>`` for each dist whose wheel mirrors its repository
#: layout (pure-Python files are copied into the wheel unchanged, so wheel lines are repository lines).
SOURCE_REPOS = {
    "vllm": ("vllm-project/vllm", "v{version}"),
    "flashinfer-python": ("flashinfer-ai/flashinfer", "v{version}"),
    "torch": ("pytorch/pytorch", "v{version}"),
}


class Verdict(str, Enum):
    """Whether a backend's own device check lets an SM12x GPU through."""

    ACCEPTS = "accepts"
    REJECTS = "rejects"
    UNKNOWN = "unknown"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Anchor(_Model):
    """Where a fact was read: ``file`` inside the wheel, 1-based ``line``, the exact ``text`` of that line
    (stripped of surrounding whitespace)."""

    file: str
    line: int = Field(ge=1)
    text: str


class TextFact(_Model):
    """A named fact found by an exact anchor text: ``found`` says whether the text is in the wheel."""

    claim: str
    found: bool
    anchor: Anchor | None = None


class FlagFact(_Model):
    """A ``vllm serve`` flag: its ``choices`` where readable from a Literal/enum annotation or a literal
    ``choices=[...]`` (None: free-form or not readable) and where it is defined."""

    choices: list[str] | None = None
    anchor: Anchor


class MoeBackendFact(_Model):
    """One ``--moe-backend`` choice.

    ``sm12x``: what the backend's own ``_supports_current_device`` returns for capability 12.0, evaluated
    from its source (see :mod:`sm120lab.upstream.pyeval`); ``sm121`` the same for 12.1. ``assumed``: the
    non-capability calls in those checks (package availability), taken as succeeding.
    ``formats``: the quantisation oracles whose ``map_*_backend`` mapping accepts this choice
    (``nvfp4``, ``mxfp4``, ``fp8``, ...). ``kernel_classes``: the NVFP4 expert classes the choice maps to.
    ``auto_selected``/``auto_order``: position in the NVFP4 auto-selection list (None: not in it).
    """

    name: str
    anchor: Anchor
    sm12x: Verdict = Verdict.UNKNOWN
    sm121: Verdict = Verdict.UNKNOWN
    sm12x_anchor: Anchor | None = None
    sm12x_note: str = ""
    assumed: list[str] = Field(default_factory=list)
    formats: list[str] = Field(default_factory=list)
    kernel_classes: list[str] = Field(default_factory=list)
    auto_selected: bool = False
    auto_order: int | None = None


class Knob(_Model):
    """A setting (env var or CLI flag) with its readable choices."""

    kind: Literal["env", "flag"]
    name: str
    choices: list[str] | None = None
    anchor: Anchor


class DenseGemm(_Model):
    """How the dense NVFP4 GEMM backend is chosen: the env var (older vLLM), the CLI flag (newer), or both."""

    env: Knob | None = None
    flag: Knob | None = None


class WheelInfo(_Model):
    filename: str
    sha256: str
    url: str | None = None


class BaseRecord(_Model):
    """What every record holds."""

    schema_version: int = SCHEMA_VERSION
    kind: str
    dist: str
    version: str
    wheel: WheelInfo
    command: str
    method: str
    requires_python: str | None = None
    requires_dist: list[str] = Field(default_factory=list)
    extras: dict[str, list[str]] = Field(default_factory=dict)

    @property
    def sha256(self) -> str:
        """The wheel's sha256 (``wheel.sha256``)."""
        return self.wheel.sha256

    @property
    def wheel_filename(self) -> str:
        return self.wheel.filename

    def source_url(self, anchor: Anchor) -> str:
        """``https://github.com/<repo>/blob/<tag>/<anchor.file>#L<anchor.line>`` (ValueError for a dist
        without a known repository)."""
        if self.dist not in SOURCE_REPOS:
            raise ValueError(f"dist: no public repository known for {self.dist!r}")
        repo, tag = SOURCE_REPOS[self.dist]
        return f"https://github.com/{repo}/blob/{tag.format(version=self.version)}/{anchor.file}#L{anchor.line}"


class MetadataRecord(BaseRecord):
    """Metadata only (torch, b12x, flashinfer-cubin): Requires-Python / Requires-Dist."""

    kind: Literal["metadata"] = "metadata"


class ArchFlagResult(_Model):
    """What ``torch.utils.cpp_extension._get_cuda_arch_flags`` returns for ``TORCH_CUDA_ARCH_LIST=value``:
    the ``-gencode`` flags, or ``error: <message>``."""

    value: str
    result: str


class TorchRecord(MetadataRecord):
    """torch: METADATA plus the ``TORCH_CUDA_ARCH_LIST`` handling of its ``cpp_extension``."""

    kind: Literal["torch"] = "torch"
    cuda_arch_flags: list[ArchFlagResult] = Field(default_factory=list)
    cuda_arch_flags_anchor: Anchor | None = None


class VllmRecord(BaseRecord):
    kind: Literal["vllm"] = "vllm"
    pins: dict[str, str] = Field(default_factory=dict)
    pin_requirements: dict[str, str] = Field(default_factory=dict)
    moe_backend_flag: bool = False
    moe_backends: list[MoeBackendFact] = Field(default_factory=list)
    nvfp4_auto_order: list[str] = Field(default_factory=list)
    nvfp4_auto_anchor: Anchor | None = None
    env_vars: dict[str, Anchor] = Field(default_factory=dict)
    env_var_choices: dict[str, list[str]] = Field(default_factory=dict)
    env_var_deprecated: dict[str, str] = Field(default_factory=dict)
    serve_flags: dict[str, FlagFact] = Field(default_factory=dict)
    attention_backends: list[str] = Field(default_factory=list)
    attention_backends_anchor: Anchor | None = None
    attention_priority_cuda: dict[str, list[str]] = Field(default_factory=dict)
    attention_priority_anchor: Anchor | None = None
    dense_nvfp4_gemm: DenseGemm = Field(default_factory=DenseGemm)
    facts: dict[str, TextFact] = Field(default_factory=dict)


class ArchListResult(_Model):
    """What FlashInfer's arch-list logic gives for one case: ``result`` like ``"12.0f"`` (several
    separated by spaces) or ``"error: <message>"``; ``warnings`` it logged on the way."""

    case: str
    capability: str | None = None
    cuda: str
    env_arch_list: str | None = None
    result: str
    warnings: list[str] = Field(default_factory=list)


class JitLoadOrder(_Model):
    """Whether an installed AOT module is loaded before a JIT build, and what keys the JIT cache folder."""

    aot_before_jit: bool | None = None
    aot_anchor: Anchor | None = None
    build_anchor: Anchor | None = None
    jit_cache_package: bool = False
    jit_cache_package_anchor: Anchor | None = None
    cache_dir_key: list[str] = Field(default_factory=list)
    cache_dir_anchor: Anchor | None = None


class FlashInferRecord(BaseRecord):
    kind: Literal["flashinfer"] = "flashinfer"
    env_vars: dict[str, Anchor] = Field(default_factory=dict)
    arch_list: list[ArchListResult] = Field(default_factory=list)
    arch_list_method: str = ""
    arch_list_anchor: Anchor | None = None
    jit_load_order: JitLoadOrder = Field(default_factory=JitLoadOrder)
    facts: dict[str, TextFact] = Field(default_factory=dict)


AnyRecord = VllmRecord | FlashInferRecord | TorchRecord | MetadataRecord

RECORD_TYPES: dict[str, type[BaseRecord]] = {"vllm": VllmRecord, "flashinfer": FlashInferRecord,
                                             "torch": TorchRecord, "metadata": MetadataRecord}


class IndexEntry(_Model):
    record: str
    kind: str
    wheel: str
    sha256: str
    command: str


class Unavailable(_Model):
    """A version some recorded release pins exactly that the registry did not serve when recording."""

    dist: str
    version: str
    pinned_by: list[str]
    reason: str


class Index(_Model):
    schema_version: int = SCHEMA_VERSION
    dists: dict[str, dict[str, IndexEntry]] = Field(default_factory=dict)
    unavailable: list[Unavailable] = Field(default_factory=list)


def parse_record(data: dict) -> BaseRecord:
    """The model of one record's JSON (by its ``kind``); ValueError for an unknown kind."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in RECORD_TYPES:
        raise ValueError(f"record: expected kind one of {sorted(RECORD_TYPES)}, got {kind!r}")
    return RECORD_TYPES[kind].model_validate(data)
