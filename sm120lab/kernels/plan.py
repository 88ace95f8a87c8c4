"""One kernel plan per MoE call: the path, the tiles and the sort block size, chosen in one place.

``plan_moe(shape, T, device=...)`` -> :class:`MoEPlan`. The plan is built from

- the shape ``(E, N, K, top_k)`` with ``N`` = the expert intermediate size ``I`` and ``K`` = the
  hidden size ``H`` (the key vLLM's per-device fused-MoE config files use, plus top-k);
- the token count ``T``, through the expected rows per active expert under uniform routing,
  ``r(T) = T k / A(T)`` with ``A(T) = E (1 - (1 - k/E)^T)`` expected active experts. Every dispatch
  threshold below is in ``r``, so a threshold means the same for E = 128 and E = 512 (a slot count
  would not: 160 slots are 1.2 rows per expert at E = 512, k = 10 and 1.5 at E = 128, k = 8);
- the target (:class:`Target`: GPU capability, Triton version, interpreter) and its capability
  gates (the only place they are written);
- a tile table (:class:`TileTable`, ``data/tiles/<device>.json``, written by
  ``sm120lab bench moe --tune``), read by nearest key; shapes never tuned fall back to
  :func:`formula_choice`.

Paths (:class:`Path`): ``frag`` (tensor-core fragment kernels, :mod:`.moe_frag`, sm_90+), ``decode``
(CUDA-core kernel, :mod:`.moe_decode`, any target incl. the interpreter, up to 1 row per expert)
and ``mma`` (the sorted grouped GEMM, :mod:`.moe_gemm`). ``fused_moe_packed`` and the benchmark
both take a plan; ``plan.as_dict()`` is what the benchmark records per row.
"""

from __future__ import annotations

import enum
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path as _FsPath

from .moe_configs import CONFIGS, DECODE_CONFIGS, FRAG_CONFIGS, DecodeConfig, FragConfig, GemmConfig

#: tile tables of the repository (``data/tiles/<device>.json``)
TILES_DIR = _FsPath(__file__).resolve().parents[2] / "data" / "tiles"
TABLE_SCHEMA = 1
#: the fragment kernels serve up to this many rows per active expert; above it the MMA kernel runs.
#: Graph-timed on a lent H100 on 2026-12-07 (data/bench/aux/wide_b_probe_h100_2026-12-07/), the 32-slot
#: tile f2w2oc4b against the MMA tile the H200 table picks: frag faster at 51, 64, 80 and 128 rows on five
#: of six layers (0.87-0.98x), slower at 80 rows on qwen3-next (H=2048: 1.12x) and at 205 and 256 rows
#: (1.05x, 1.07x). Before the 32-slot tiles (H200 tuning of 2026-12-03) the bound was 40.
FRAG_MAX_ROWS = 128.0
#: above this many rows per active expert the fragment plan takes the 32-slot groups (f2w2oc4b) instead
#: of the 16-slot ones (f2w2oc2b): same H100 run, f2w2oc4b 0.81-0.95x the layer time at 20-256 rows on
#: all 12 (layer, T) pairs measured, 1.01-1.38x at 5-16 rows on all 6 (bit-identical outputs)
FRAG_WIDE_MIN_ROWS = 16.0
#: up to this many rows per active expert the fragment kernel runs one slot per program (no sort): each
#: extra row re-reads its expert's weights, the sort costs 12-15 us. Tuned: one slot per program won at
#: 1.03-1.10 rows (T=4 of every preset), 8-slot groups at 1.15-1.55 (T=16)
FRAG_UNSORTED_MAX_ROWS = 1.12
#: the CUDA-core decode kernel (where the fragment kernels cannot run) serves up to this many rows per
#: active expert (it re-reads an expert's weights per row: 1.6x slower than the MMA kernel at 1.74, E=512 k=10 T=64)
DECODE_MAX_ROWS = 1.25
#: the decode kernel runs in token order (no sort) up to this many slots
DECODE_UNSORTED_MAX_SLOTS = 160
#: a tuned shape stands in for another when sum |log2(ratio)| over (E, N, K, top_k) is at most this
NEAREST_SHAPE_MAX_DIST = 1.5
#: the T buckets a table is tuned at (powers of 4)
T_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096)


class Path(str, enum.Enum):
    FRAG = "frag"
    DECODE = "decode"
    MMA = "mma"


Config = GemmConfig | DecodeConfig | FragConfig


# ---------------------------------------------------------------- capability gates (the only ones)

def interpreting() -> bool:
    """True when the kernels were imported under Triton's CPU interpreter (``TRITON_INTERPRET=1``
    at import time decides: ``triton.jit`` then returns an interpreted function)."""
    import triton

    from .moe_gemm import moe_nvfp4_gemm_kernel

    return not isinstance(moe_nvfp4_gemm_kernel, triton.runtime.jit.JITFunction)


def _triton_version() -> tuple[int, int]:
    import triton
    from packaging.version import Version

    return tuple(Version(triton.__version__).release[:2])


@dataclass(frozen=True)
class Target:
    """Where a plan runs.

    Args:
        name: the tile-table key (``h200``, ``sm120``...; :func:`device_slug`).
        capability: CUDA (major, minor), or None (CPU).
        triton: (major, minor) of Triton.
        interpret: kernels run under Triton's CPU interpreter.
    """

    name: str
    capability: tuple[int, int] | None
    triton: tuple[int, int]
    interpret: bool = False

    @property
    def arch(self) -> str:
        return "cpu" if self.capability is None else f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def gpu(self) -> bool:
        return self.capability is not None and not self.interpret

    @property
    def frag(self) -> bool:
        """Fragment kernels: inline PTX ``mul.rn.bf16x2`` / ``cvt.rn.f16x2.e4m3x2`` + warp-collective mma.sync, sm_90+."""
        return self.gpu and self.capability >= (9, 0)

    @property
    def fast_decode(self) -> bool:
        """The decode kernel's inline PTX (``cvt.rn.f16x2.e4m3x2``): sm_89+."""
        return self.gpu and self.capability >= (8, 9)

    @property
    def fast_gemm(self) -> bool:
        """The MMA kernel's FAST dequantization (``mul.rn.bf16x2``): sm_90+."""
        return self.gpu and self.capability >= (9, 0)

    @property
    def native_fp4(self) -> bool:
        """``tl.dot_scaled`` with NVFP4 lowers to block-scaled FP4 MMA: sm_100/103 (tcgen05), sm_120 with
        Triton >= 3.6 and sm_121 with Triton >= 3.9 (data/triton_aot/: Triton 3.6.0 fails for sm_121).
        Never under the interpreter (its NVFP4 dot_scaled misreads the scales, Triton 3.6-3.9)."""
        if not self.gpu:
            return False
        major, minor = self.capability
        return major == 10 or (major == 12 and (self.triton >= (3, 9) or (minor == 0 and self.triton >= (3, 6))))

    def allows(self, path: Path) -> bool:
        return path is not Path.FRAG or self.frag

    def as_dict(self) -> dict:
        return {"name": self.name, "arch": self.arch, "triton": ".".join(map(str, self.triton)),
                "interpret": self.interpret}

    @classmethod
    def named(cls, arch: str, triton: tuple[int, int] | None = None) -> Target:
        """An offline target from an arch name (``sm120``, ``sm_121``, ``sm90``...), e.g. for tables."""
        digits = arch.lower().replace("sm_", "").replace("sm", "")
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"arch must look like sm120 or sm_90, got {arch!r}")
        cap = (int(digits[:-1]), int(digits[-1]))
        return cls(name=f"sm{digits}", capability=cap, triton=triton or _triton_version())


def device_slug(name: str) -> str:
    """GPU name -> table key: ``NVIDIA H200`` -> ``h200``."""
    s = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    while "--" in s:
        s = s.replace("--", "-")
    return s.removeprefix("nvidia-")


@lru_cache(maxsize=16)
def _device_target(dev: str) -> Target:
    import torch

    d = torch.device(dev)
    interp = interpreting()
    if d.type != "cuda" or not torch.cuda.is_available():
        return Target(name="cpu", capability=None, triton=_triton_version(), interpret=interp)
    return Target(name=device_slug(torch.cuda.get_device_name(d)), capability=torch.cuda.get_device_capability(d),
                  triton=_triton_version(), interpret=interp)


def target_of(device=None) -> Target:
    """The :class:`Target` of a torch device (None: ``cuda`` where available, else CPU)."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return _device_target(str(d))


def frag_supported(device) -> bool:
    """True where the fragment kernel's inline PTX runs: CUDA sm_90+, not interpreted."""
    return target_of(device).frag


def fast_decode_supported(device) -> bool:
    """True where the decode kernel's inline PTX runs: CUDA sm_89+, not interpreted."""
    return target_of(device).fast_decode


def native_fp4_supported(device=None) -> bool:
    """True where ``tl.dot_scaled`` with NVFP4 lowers to block-scaled FP4 MMA (:attr:`Target.native_fp4`)."""
    import torch

    if device is not None and torch.device(device).type != "cuda":
        return False
    if not torch.cuda.is_available():
        return False
    return target_of(device).native_fp4


# ---------------------------------------------------------------- shape

@dataclass(frozen=True)
class MoEShape:
    """One MoE layer: ``E`` experts, ``N`` = expert intermediate size I, ``K`` = hidden size H, top-k."""

    E: int
    N: int
    K: int
    top_k: int

    def __post_init__(self):
        for name in ("E", "N", "K", "top_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"MoEShape.{name} must be a positive integer, got {v!r}")
        if self.top_k > self.E:
            raise ValueError(f"MoEShape.top_k must be <= E={self.E}, got {self.top_k}")

    @classmethod
    def of(cls, e: int, hidden: int, inter: int, top_k: int) -> MoEShape:
        return cls(E=int(e), N=int(inter), K=int(hidden), top_k=int(top_k))

    @property
    def key(self) -> str:
        return f"E={self.E},N={self.N},K={self.K},top_k={self.top_k}"

    @property
    def frag_ok(self) -> bool:
        """The fragment layout exists for both weights: w13 [E, 2N, K], w2 [E, K, N] need rows % 16, K % 64."""
        return self.K % 64 == 0 and self.N % 64 == 0

    def active_experts(self, tokens: int) -> float:
        """``E (1 - (1 - k/E)^T)``: expected experts with >= 1 row under uniform top-k routing."""
        if tokens <= 0:
            return 0.0
        return self.E * (1.0 - (1.0 - self.top_k / self.E) ** tokens)

    def rows_per_expert(self, tokens: int) -> float:
        """``T k / A(T)``: expected rows per active expert (>= 1)."""
        a = self.active_experts(tokens)
        return tokens * self.top_k / a if a > 0 else 0.0

    def distance(self, other: MoEShape) -> float:
        """sum |log2(ratio)| over (E, N, K, top_k)."""
        return sum(abs(math.log2(getattr(self, f) / getattr(other, f))) for f in ("E", "N", "K", "top_k"))

    def as_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- the formula (shapes never tuned)

def formula_choice(shape: MoEShape, tokens: int, target: Target, paths: frozenset[Path] | None = None,
                   ) -> tuple[Path, Config, Config]:
    """(path, w13 tile, w2 tile) from rows per active expert ``r`` (the H200 tuning of four presets,
    data/tiles/h200.json, restated in ``r``):

    - ``frag`` where the target and shape allow it and ``r <= FRAG_MAX_ROWS`` (:func:`frag_tiles`);
    - else ``decode`` up to ``DECODE_MAX_ROWS`` (token order up to 160 slots);
    - else ``mma`` (:func:`mma_tiles`).
    """
    allowed = frozenset(Path) if paths is None else paths
    r = shape.rows_per_expert(tokens)
    if Path.FRAG in allowed and target.frag and shape.frag_ok and (r <= FRAG_MAX_ROWS or allowed == {Path.FRAG}):
        return (Path.FRAG, *frag_tiles(r, shape.K // 16 * tokens))
    if Path.DECODE in allowed and (r <= DECODE_MAX_ROWS or Path.MMA not in allowed):
        return (Path.DECODE, *decode_tiles(tokens * shape.top_k))
    if Path.MMA not in allowed:
        raise ValueError(f"no allowed path runs here: paths={sorted(p.value for p in allowed)} on {target.arch}"
                         + (" (the fragment path needs sm_90+ and N, K multiples of 64)" if Path.FRAG in allowed else ""))
    return (Path.MMA, *mma_tiles(r))


def frag_tiles(rows_per_expert: float, w2sum_programs: int) -> tuple[FragConfig, FragConfig]:
    """Fragment (w13, w2) tiles, the winners of the H200 tuning at four presets (data/tiles/h200.json):
    one slot per program up to ``FRAG_UNSORTED_MAX_ROWS`` (w2 through the w2+sum kernel, its tile by
    ``w2sum_programs`` = H/16 x T: up to 768 programs 1 tile x 8 warps), 8-slot groups (f2w2o) up to
    12 rows, 16-slot groups of the wide kernel up to ``FRAG_WIDE_MIN_ROWS``: ``f2w2oc2b``, the H200 winner
    ``f2w2oc2`` with one activation load per lane for both tiles (``SHARE_B``; bit-identical outputs, the layer
    0.90-0.92x the time at T = 1024 on three presets; a lent H100, notes/triton_kernels.md, thirteenth round);
    32-slot groups above: ``f2w2oc4b``, each warp four 8-slot tiles against one weight fragment (the layer
    0.81-0.95x the time of ``f2w2oc2b`` at 20-256 rows, fourteenth round)."""
    r = rows_per_expert
    if r <= FRAG_UNSORTED_MAX_ROWS:
        w2 = "f1w8" if w2sum_programs <= 768 else "f2w4" if w2sum_programs <= 2048 else "f2w2"
        return FRAG_CONFIGS["f2w4"], FRAG_CONFIGS[w2]
    if r <= 12:
        return FRAG_CONFIGS["f2w2o"], FRAG_CONFIGS["f2w2o"]
    if r <= FRAG_WIDE_MIN_ROWS:
        return FRAG_CONFIGS["f2w2oc2b"], FRAG_CONFIGS["f2w2oc2b"]
    return FRAG_CONFIGS["f2w2oc4b"], FRAG_CONFIGS["f2w2oc4b"]


def decode_tiles(num_slots: int) -> tuple[DecodeConfig, DecodeConfig]:
    """Decode (w13, w2) tiles: token order (no sort launch) up to ``DECODE_UNSORTED_MAX_SLOTS``, else sorted."""
    c = DECODE_CONFIGS["d8x64w2s1"] if num_slots <= DECODE_UNSORTED_MAX_SLOTS else DECODE_CONFIGS["d16x64w4s1o"]
    return c, c


def mma_tiles(rows_per_expert: float) -> tuple[GemmConfig, GemmConfig]:
    """MMA-kernel (w13, w2) tiles sharing BLOCK_M: 16 up to 16 rows per expert, 32 up to 48, 64 up to 64
    (qwen3-235b T=1024: m64n64k64w4s4 2.33 ms, m128n64k64w8s3 2.52), 128 above (T=4096 at every preset)."""
    if not rows_per_expert > 0:
        raise ValueError(f"rows_per_expert must be > 0, got {rows_per_expert}")
    if rows_per_expert <= 16:
        c = CONFIGS["m16n64k128w4s4"]
    elif rows_per_expert <= 48:
        c = CONFIGS["m32n64k128w4s3f"]
    elif rows_per_expert <= 64:
        c = CONFIGS["m64n64k64w4s4"]
    else:
        c = CONFIGS["m128n64k64w8s3"]
    return c, c


# ---------------------------------------------------------------- tile tables

def config_by_name(path: Path, name: str) -> Config:
    """The named tile of ``path`` (KeyError with the known names otherwise)."""
    table = {Path.FRAG: FRAG_CONFIGS, Path.DECODE: DECODE_CONFIGS, Path.MMA: CONFIGS}[Path(path)]
    if name not in table:
        raise KeyError(f"unknown {Path(path).value} tile {name!r}; known: {', '.join(table)}")
    return table[name]


@dataclass
class TileTable:
    """Tuned (path, w13 tile, w2 tile) per (shape, T bucket) for one device.

    JSON: ``{"schema": 1, "device": ..., "verified": bool, "source": ..., "entries": [{"E", "N", "K",
    "top_k", "T", "path", "w13", "w2", "us", ...}]}``. ``verified`` is False for tables derived
    without running on the device (the SM120/SM121 tables from the AOT table's fit rules).
    """

    device: str
    verified: bool = True
    source: str = ""
    entries: list[dict] = field(default_factory=list)
    path: str | None = None  # the file it was read from (not serialized)

    @classmethod
    def load(cls, path) -> TileTable:
        p = _FsPath(path)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"tile table {p}: cannot read it ({type(exc).__name__}: {exc})") from None
        if not isinstance(doc, dict) or doc.get("schema") != TABLE_SCHEMA or not isinstance(doc.get("entries"), list):
            raise ValueError(f"tile table {p}: expected a schema {TABLE_SCHEMA} object with 'entries'")
        for key in ("device", "source"):
            if not isinstance(doc.get(key, ""), str):
                raise ValueError(f"tile table {p}: {key}: expected a string, got {doc[key]!r}")
        for i, e in enumerate(doc["entries"]):
            problem = entry_problem(e)
            if problem:  # refused here, in one line, not at plan time as a math domain error or a KeyError
                raise ValueError(f"tile table {p}: entries[{i}]: {problem}")
        return cls(device=doc.get("device", p.stem), verified=bool(doc.get("verified", False)),
                   source=doc.get("source", ""), entries=doc["entries"], path=str(p))

    def to_json(self) -> dict:
        return {"schema": TABLE_SCHEMA, "device": self.device, "verified": self.verified, "source": self.source,
                "entries": sorted(self.entries, key=lambda e: (e["E"], e["N"], e["K"], e["top_k"], e["T"]))}

    def save(self, path=None) -> str:
        from ..atomic_io import write_json_atomic

        out = path or self.path
        if out is None:
            raise ValueError("TileTable.save needs a path")
        write_json_atomic(_FsPath(out), self.to_json())
        self.path = str(out)
        reload_tables()
        return str(out)

    def put(self, shape: MoEShape, tokens: int, path: Path, w13: Config, w2: Config, **extra) -> dict:
        """Insert or replace the entry of (shape, T)."""
        entry = {**shape.as_dict(), "T": int(tokens), "path": Path(path).value, "w13": w13.name, "w2": w2.name,
                 **extra}
        self.entries = [e for e in self.entries if not (_entry_shape(e) == shape and e["T"] == tokens)]
        self.entries.append(entry)
        return entry

    def lookup(self, shape: MoEShape, tokens: int, target: Target, paths: frozenset[Path] | None = None,
               ) -> tuple[dict, str] | None:
        """(entry, how) for (shape, T), or None.

        The exact shape: the entry at the nearest T (|log2| distance). Else the nearest tuned shape
        within ``NEAREST_SHAPE_MAX_DIST``: its entry with the nearest rows per active expert (the
        quantity the path and tiles depend on). Entries whose path the target or ``paths`` exclude,
        or whose fragment path the shape cannot take, give None (the formula answers).
        """
        allowed = frozenset(Path) if paths is None else paths

        def usable(e):
            p = Path(e["path"])
            return p in allowed and target.allows(p) and (p is not Path.FRAG or shape.frag_ok)

        if not self.entries or tokens < 1:
            return None
        exact = [e for e in self.entries if _entry_shape(e) == shape]
        if exact:
            best = min(exact, key=lambda e: (abs(math.log2(e["T"] / tokens)), -e["T"]))
            how = f"table {self.device}: exact shape, T={best['T']}"
        else:
            shapes = {_entry_shape(e) for e in self.entries}
            near = min(shapes, key=lambda s: (shape.distance(s), s.key))
            dist = shape.distance(near)
            if dist > NEAREST_SHAPE_MAX_DIST:
                return None
            r = shape.rows_per_expert(tokens)
            same = [e for e in self.entries if _entry_shape(e) == near]
            best = min(same, key=lambda e: abs(math.log2(near.rows_per_expert(e["T"]) / r)))
            how = f"table {self.device}: nearest shape {near.key} (distance {dist:.2f}), T={best['T']}"
        # an entry this target or these paths cannot run is not replaced by one tuned at another T: the formula answers
        return (best, how) if usable(best) else None


def entry_problem(e: object) -> str | None:
    """What is wrong with one tile-table entry (``"T: expected a positive integer, got 0"``), or None.

    An entry needs positive integers E, N, K, top_k (<= E) and T, a ``path`` of :class:`Path` and
    ``w13``/``w2`` tiles of that path (:func:`config_by_name`) that pair (:func:`tile_pair_problem`); other keys
    (``us``, ``date``...) are free.
    """
    if not isinstance(e, dict):
        return f"expected an object with E, N, K, top_k, T, path, w13, w2, got {type(e).__name__}"
    for key in ("E", "N", "K", "top_k", "T"):
        v = e.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return f"{key}: expected a positive integer, got {v!r}"
    if e["top_k"] > e["E"]:
        return f"top_k: expected <= E={e['E']}, got {e['top_k']}"
    try:
        path = Path(e.get("path"))
    except ValueError:
        return f"path: expected one of {', '.join(p.value for p in Path)}, got {e.get('path')!r}"
    tiles = []
    for role in ("w13", "w2"):
        name = e.get(role)
        if not isinstance(name, str):
            return f"{role}: expected a {path.value} tile name, got {name!r}"
        try:
            tiles.append(config_by_name(path, name))
        except KeyError as exc:
            return f"{role}: {exc.args[0]}"
    problem = tile_pair_problem(path, *tiles)
    return f"w13/w2: {problem}" if problem else None


def _entry_shape(e: dict) -> MoEShape:
    return MoEShape(E=int(e["E"]), N=int(e["N"]), K=int(e["K"]), top_k=int(e["top_k"]))


def table_path(target: Target, root=None) -> _FsPath | None:
    """``<root>/<device>.json`` (e.g. h200.json), else ``<root>/sm<cc>.json``; None when neither exists."""
    root = _FsPath(root) if root is not None else _FsPath(os.environ.get("SM120LAB_TILES_DIR", TILES_DIR))
    names = [f"{target.name}.json"]
    if target.capability is not None:
        names.append(f"sm{target.capability[0]}{target.capability[1]}.json")
    for n in names:
        if (root / n).is_file():
            return root / n
    return None


@lru_cache(maxsize=32)
def _load_cached(target: Target, root: str | None) -> TileTable | None:
    p = table_path(target, root)
    return None if p is None else TileTable.load(p)


def table_for(target: Target, root=None) -> TileTable | None:
    """The tile table of ``target``, or None; read once per process (:func:`reload_tables` forgets them)."""
    return _load_cached(target, None if root is None else str(root))


def reload_tables() -> None:
    """Forget the tables and plans read so far (after a table file changed)."""
    _load_cached.cache_clear()
    _plan_cached.cache_clear()


# ---------------------------------------------------------------- the plan

@dataclass(frozen=True)
class MoEPlan:
    """What one MoE call runs: ``path``, the (w13, w2) tiles, the sort block size, and where they came from.

    Args:
        shape / tokens / target / mode: the inputs the plan was built from.
        path: :class:`Path`. w13 / w2: the tiles (:class:`FragConfig`, :class:`DecodeConfig` or
            :class:`GemmConfig` by path).
        fast: inline-PTX variants (decode: ``cvt.rn.f16x2.e4m3x2``; mma: FAST tiles kept) where the target has them.
        native: W4A4 only, ``tl.dot_scaled`` block-scaled FP4 MMA.
        source: "table ...", "formula" or "override".
    """

    shape: MoEShape
    tokens: int
    target: Target
    path: Path
    w13: Config
    w2: Config
    mode: str = "w4a16"
    fast: bool = False
    native: bool = False
    source: str = "formula"

    @property
    def sorted(self) -> bool:
        return self.path is Path.MMA or bool(getattr(self.w13, "SORTED", False))

    @property
    def sort_block(self) -> int:
        """``moe_sort`` block size; 0 = no sort launch (one slot per program, token order)."""
        if self.path is Path.MMA:
            return self.w13.BLOCK_M
        if not self.w13.SORTED:
            return 0
        return self.w13.block_m if self.path is Path.FRAG else 1

    @property
    def w2_sums(self) -> bool:
        """The fragment path's unsorted w2 runs w2 and the k-sum in one launch (bf16 out)."""
        return self.path is Path.FRAG and not self.w2.SORTED

    @property
    def rows_per_expert(self) -> float:
        return self.shape.rows_per_expert(self.tokens)

    def as_dict(self) -> dict:
        return {"shape": self.shape.as_dict(), "T": self.tokens, "target": self.target.as_dict(), "mode": self.mode,
                "path": self.path.value, "w13": self.w13.name, "w2": self.w2.name, "sort_block": self.sort_block,
                "fast": self.fast, "native": self.native, "source": self.source,
                "rows_per_expert": round(self.rows_per_expert, 4),
                "active_experts": round(self.shape.active_experts(self.tokens), 2)}


def _path_of(cfg: Config) -> Path:
    return Path.FRAG if isinstance(cfg, FragConfig) else Path.DECODE if isinstance(cfg, DecodeConfig) else Path.MMA


def tile_pair_problem(path: Path, w13: Config, w2: Config) -> str | None:
    """What is wrong with ``path``'s (w13, w2) tile pair whatever the shape and the GPU, or None: each tile of the
    path; fragment w13 an even ``TILES`` (gate and up tiles), no ``SHARE_B`` on an unsorted w2 (the w2+sum kernel
    has none), both sorted or both not, one block size; decode both sorted or both not; MMA one ``BLOCK_M``."""
    for role, c in (("w13", w13), ("w2", w2)):
        if _path_of(c) is not path:
            return f"{role} tile {c.name} is not a {path.value} tile"
    if path is Path.FRAG:
        if w13.TILES % 2:
            return f"the w13 fragment tile needs an even TILES (gate and up tiles), got {w13.name}"
        if not w2.SORTED and w2.SHARE_B:
            return f"{w2.name}: SHARE_B is not an option of the unsorted w2 (the w2+sum kernel)"
        if w13.SORTED != w2.SORTED or w13.block_m != w2.block_m:
            return f"fragment tiles must agree on SORTED and the block size, got {w13.name} and {w2.name}"
    elif path is Path.DECODE:
        if w13.SORTED != w2.SORTED:
            return f"decode tiles must agree on SORTED, got {w13.name} and {w2.name}"
    elif w13.BLOCK_M != w2.BLOCK_M:
        return f"MMA tiles must share BLOCK_M, got {w13.name} and {w2.name}"
    return None


def _validate(path: Path, w13: Config, w2: Config, shape: MoEShape, target: Target) -> None:
    for role, c in (("w13", w13), ("w2", w2)):
        if _path_of(c) is not path:
            raise ValueError(f"{role} tile {c.name} is not a {path.value} tile")
    if not target.allows(path):
        raise ValueError(f"path {path.value} needs sm_90+ (not interpreted), target is {target.arch}"
                         + (" under the interpreter" if target.interpret else ""))
    if path is Path.FRAG and not shape.frag_ok:
        raise ValueError(f"the fragment path needs N and K multiples of 64, got {shape.key}")
    problem = tile_pair_problem(path, w13, w2)
    if problem:
        raise ValueError(problem)


def plan_moe(shape: MoEShape, tokens: int, *, device=None, target: Target | None = None, mode: str = "w4a16",
             paths: frozenset[Path] | set[Path] | None = None, tiles: tuple[Config, Config] | None = None,
             table: TileTable | bool | None = None, fast: bool | None = None, native: bool | None = None) -> MoEPlan:
    """Build the plan of one MoE call (the only place a path or a tile is chosen).

    Args:
        shape: :class:`MoEShape`. tokens: T (>= 0).
        device / target: where it runs (``target`` wins; default: the current CUDA device, else CPU).
        mode: "w4a16" or "w4a4" (W4A4 runs the MMA kernel only).
        paths: the paths allowed (default: all the target supports).
        tiles: (w13, w2) tiles to use as given (their type fixes the path); source "override".
        table: a :class:`TileTable`, False for none (formula only), None for the target's table in ``data/tiles``.
        fast: inline-PTX variants; None = where the target has them. native: W4A4 ``tl.dot_scaled``; None = where supported.

    Returns:
        :class:`MoEPlan`.
    """
    if mode not in ("w4a16", "w4a4"):
        raise ValueError(f"mode must be 'w4a16' or 'w4a4', got {mode!r}")
    if not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be an integer >= 0, got {tokens!r}")
    tgt = target if target is not None else target_of(device)
    allowed = frozenset(Path) if paths is None else frozenset(Path(p) for p in paths)
    tiles = None if tiles is None else tuple(tiles)
    if table is None or table is False:  # the default tables: the same arguments give the same plan
        return _plan_cached(shape, tokens, tgt, mode, allowed, tiles, table is None, fast, native)
    return _build_plan(shape, tokens, tgt, mode, allowed, tiles, table, fast, native)


@lru_cache(maxsize=4096)
def _plan_cached(shape, tokens, tgt, mode, allowed, tiles, use_table, fast, native) -> MoEPlan:
    return _build_plan(shape, tokens, tgt, mode, allowed, tiles, None if use_table else False, fast, native)


def _build_plan(shape: MoEShape, tokens: int, tgt: Target, mode: str, allowed: frozenset[Path], tiles, table,
                fast, native) -> MoEPlan:
    if mode == "w4a4":
        allowed = frozenset({Path.MMA})
    if tiles is not None:
        w13, w2 = tiles
        path = _path_of(w13)
        if path not in allowed:
            raise ValueError(f"tiles {w13.name}/{w2.name} are {path.value} tiles, but paths={sorted(p.value for p in allowed)}")
        source = "override"
    else:
        tab = table_for(tgt) if table is None else (table or None)
        hit = tab.lookup(shape, max(tokens, 1), tgt, allowed) if tab is not None and mode == "w4a16" else None
        if hit is not None:
            e, how = hit
            path = Path(e["path"])
            w13, w2 = config_by_name(path, e["w13"]), config_by_name(path, e["w2"])
            source = how
        else:
            path, w13, w2 = formula_choice(shape, max(tokens, 1), tgt, allowed)
            source = "formula"
    _validate(path, w13, w2, shape, tgt)
    use_fast = (tgt.fast_decode if path is Path.DECODE else tgt.fast_gemm) if fast is None else bool(fast)
    if path is Path.MMA and (not tgt.fast_gemm or mode == "w4a4" and (tgt.native_fp4 if native is None else native)):
        # the inline PTX (mul.bf16x2) needs sm_90+ and cannot run under the interpreter or with dot_scaled
        w13, w2 = replace(w13, FAST=False), replace(w2, FAST=False)
    use_native = mode == "w4a4" and (tgt.native_fp4 if native is None else bool(native))
    return MoEPlan(shape=shape, tokens=tokens, target=tgt, path=path, w13=w13, w2=w2, mode=mode, fast=use_fast,
                   native=use_native, source=source)


def tune_candidates(shape: MoEShape, tokens: int, target: Target) -> list[tuple[Path, list[Config], list[Config]]]:
    """Groups (path, w13 tiles, w2 tiles; an empty w2 list = the w13 tile for both) that ``bench moe --tune``
    times at (shape, T): the formula's path and, near a path boundary, the neighbouring one (one slot per
    program up to 2.8 rows per expert, sorted groups above 1 row; the MMA kernel above 12 rows, the
    fragment kernels up to 80). Within a group the sweep is greedy: w13 tiles with the formula's w2
    tile, then w2 tiles with the best w13 (``sm120lab.bench.moe.tune_pairs``)."""
    r = shape.rows_per_expert(tokens)
    groups: list[tuple[Path, list[Config], list[Config]]] = []
    frag_ok = target.frag and shape.frag_ok
    if frag_ok and r <= FRAG_UNSORTED_MAX_ROWS * 2.5:
        unsorted = [c for c in FRAG_CONFIGS.values() if not c.SORTED]
        groups.append((Path.FRAG, [c for c in unsorted if c.TILES % 2 == 0], [c for c in unsorted if not c.SHARE_B]))
    if frag_ok and 1.0 < r <= FRAG_MAX_ROWS * 2:
        for bm in (8, 16, 32) if r > 12 else (8,):
            same = [c for c in FRAG_CONFIGS.values() if c.SORTED and c.block_m == bm]
            groups.append((Path.FRAG, [c for c in same if c.TILES % 2 == 0], same))
    if not frag_ok and r <= DECODE_MAX_ROWS * 2:
        groups.append((Path.DECODE, list(DECODE_CONFIGS.values()), []))
    if (not frag_ok and r > DECODE_MAX_ROWS) or r > 12:
        bms = {16, 32, 64} if r <= 48 else {32, 64, 128}
        fast_ok = target.fast_gemm
        groups.append((Path.MMA, [c for c in CONFIGS.values() if c.BLOCK_M in bms and (fast_ok or not c.FAST)], []))
    return groups


def derive_aot_table(aot_doc: dict, arch: str, shapes: dict[str, MoEShape], tokens=T_BUCKETS) -> TileTable:
    """An unverified table for ``arch`` (sm120 / sm121): the formula's choice at each shape and T bucket,
    kept only where the AOT table (``data/triton_aot/``) shows both tiles compiled for that arch, fitting
    SM120's 101,376 B of shared memory with no register spills; otherwise the formula's MMA fallback
    (checked the same way). Nothing here ran on that GPU."""
    tgt = Target.named(arch)
    rows = {(r["config"], r["target"]): r for r in aot_doc["rows"]}

    def fits(cfg: Config) -> bool:
        r = [v for (name, t), v in rows.items() if name == cfg.name and t == tgt.arch]
        return bool(r) and all(v["fits_sm120"] and v["n_spill_stores"] == 0 and v["n_spill_loads"] == 0 for v in r)

    tab = TileTable(device=tgt.name, verified=False,
                    source=f"derived from the AOT table (Triton {aot_doc.get('triton')}, {tgt.arch}) by "
                           "sm120lab.kernels.plan.derive_aot_table: the formula's tiles where they compile, fit "
                           "101,376 B of shared memory and do not spill; never run on that GPU")
    for name, shape in shapes.items():
        for t in tokens:
            path, w13, w2 = formula_choice(shape, t, tgt)
            if not (fits(w13) and fits(w2)):
                path, w13, w2 = formula_choice(shape, t, tgt, frozenset({Path.MMA}))
                if not (fits(w13) and fits(w2)):
                    continue
            tab.put(shape, t, path, w13, w2, preset=name, verified=False)
    return tab
