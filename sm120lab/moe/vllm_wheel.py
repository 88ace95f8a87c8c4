"""vLLM's own NVFP4 Marlin MoE, run from a real vLLM wheel on a machine where ``import vllm`` fails.

The production kernel SM120 owners serve with (``--moe-backend marlin``) is vLLM's compiled
``moe_wna16_marlin_gemm`` driven by vLLM's Python (``prepare_nvfp4_moe_layer_for_marlin``,
``fused_marlin_moe``). A GPU box without vLLM's dependency tree (the lent H200 has torch and Triton
but no registry) can still run exactly that code: this module keeps a **wheel cache**, the wheel's
own ``vllm/**.py`` tree, its ``.dist-info`` and its two op extensions, unchanged and hash-checked, and
imports the handful of vLLM modules the Marlin path needs from it. Nothing of vLLM is copied into
this repository: the cache is filled from the wheel at run time (``sm120lab upstream vllm-cache``).

Order of preference (:func:`marlin_runtime`):

1. ``import vllm`` works: vLLM's installed modules, nothing else touched;
2. a wheel cache (``$SM120LAB_VLLM_CACHE/<version>/`` or ``<cache_root>/vllm-wheel/<version>/``):
   - package ``__init__`` files of ``vllm``, ``vllm.model_executor`` and
     ``vllm.model_executor.layers`` are not run (they import the whole engine); every other module
     runs unchanged from the wheel;
   - a third-party module the import chain names but this machine lacks (``openai``, ``cbor2``, ...,
     all outside the kernel path) is served as an inert placeholder, and each one is listed in the
     run's notes (``stubbed``), so a record says exactly what was not real;
   - the two op libraries load through vLLM's own ``import vllm._C*`` lines.
3. neither: one line that says what to run.

A cache is used only when complete: ``manifest.json`` (written last, then the folder renamed into
place) lists every file with its sha256, the wheel's name, version and torch pin. A folder without
it, or with a file that differs, is refused with the command that rebuilds it.

The torch ABI: vLLM's wheels pin one torch (``torch==2.11.0`` for 0.20.0-0.26.0 by this project's
records in ``data/upstream/``); a cache whose pin differs from the running torch's release is refused
before its extensions are loaded (:class:`VllmWheelError`), since loading them may crash the process.
"""

from __future__ import annotations

import email.parser
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import sys
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import cache_root

#: the manifest's schema; a newer one is refused (written by a newer sm120lab)
SCHEMA = 1
MANIFEST = "manifest.json"
#: vLLM package ``__init__`` files that import the whole engine and are not run from a cache
HOLLOW = ("vllm", "vllm.model_executor", "vllm.model_executor.layers")
#: the modules the Marlin NVFP4 MoE path imports (newest location first where they moved)
MARLIN_MODULES = ("vllm.model_executor.layers.fused_moe.experts.marlin_moe",
                  "vllm.model_executor.layers.fused_moe.fused_marlin_moe")
PREPARE_MODULE = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp4"
ACTIVATION_MODULE = "vllm.model_executor.layers.fused_moe.activation"
#: compiled ops the path calls, per extension namespace (``torch.ops.<ns>.<op>``)
REQUIRED_OPS = {"_moe_C": ("moe_wna16_marlin_gemm", "moe_align_block_size", "moe_sum"),
                "_C": ("gptq_marlin_repack", "silu_and_mul")}
#: vLLM's op extensions as modules (0.26.0 names them ``_C_stable_libtorch``/``_moe_C_stable_libtorch``)
EXTENSION_MODULES = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch", "vllm._C", "vllm._moe_C")
_EXTENSION = re.compile(r"^vllm/_(?:moe_)?C(?:_stable_libtorch)?\.abi3\.so$")


class VllmWheelError(RuntimeError):
    """A one-line reason the wheel cache cannot be built or used; the message says what to do."""


def cache_dir() -> Path:
    """The folder holding one ``<version>/`` cache per vLLM release (``$SM120LAB_VLLM_CACHE`` overrides)."""
    env = os.environ.get("SM120LAB_VLLM_CACHE")
    return Path(env).expanduser() if env else cache_root() / "vllm-wheel"


def build_command(version: str) -> str:
    return f"sm120lab upstream vllm-cache {version}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _wanted(name: str) -> bool:
    """Which wheel members a cache keeps: vLLM's Python, its dist-info, the two op extensions."""
    if name.endswith("/"):
        return False
    if name.startswith("vllm/") and name.endswith(".py"):
        return True
    if re.match(r"^vllm-[^/]+\.dist-info/(METADATA|entry_points\.txt|RECORD|WHEEL)$", name):
        return True
    return bool(_EXTENSION.match(name))


def wheel_identity(wheel: Path) -> tuple[str, str, str | None]:
    """(name, version, torch pin or None) from the wheel's file name and its METADATA, which must agree.

    Raises:
        VllmWheelError: not a vLLM wheel, or its METADATA names another distribution or version.
    """
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        raise VllmWheelError(f"wheel: expected a vLLM .whl file name, got {wheel.name!r}") from None
    if canonicalize_name(name) != "vllm":
        raise VllmWheelError(f"wheel: {wheel.name} is a {name} wheel, expected vllm")
    try:
        with zipfile.ZipFile(wheel) as z:
            meta_name = next((n for n in z.namelist() if re.match(r"^vllm-[^/]+\.dist-info/METADATA$", n)), None)
            if meta_name is None:
                raise VllmWheelError(f"wheel: {wheel.name} has no vllm-*.dist-info/METADATA")
            text = z.read(meta_name).decode("utf-8", "replace")
    except zipfile.BadZipFile:
        raise VllmWheelError(f"wheel: {wheel} is not a readable zip file (truncated download?)") from None
    head = email.parser.Parser().parsestr(text, headersonly=True)
    meta_dist, meta_version = str(head.get("Name", "")).strip(), str(head.get("Version", "")).strip()
    if canonicalize_name(meta_dist) != "vllm" or meta_version != str(version):
        raise VllmWheelError(f"wheel: {wheel.name}'s METADATA says {meta_dist} {meta_version}, "
                             f"its file name says vllm {version}")
    return "vllm", str(version), _torch_pin(head.get_all("Requires-Dist") or [])


def _torch_pin(requires_dist: list[str]) -> str | None:
    """The exact ``torch==X`` a default install of the wheel takes (markers evaluated for Linux x86_64), or None."""
    from packaging.requirements import InvalidRequirement, Requirement

    env = {"sys_platform": "linux", "platform_machine": "x86_64", "platform_system": "Linux",
           "python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    for raw in requires_dist:
        try:
            req = Requirement(str(raw))
        except InvalidRequirement:
            continue
        if req.name.lower() != "torch" or (req.marker is not None and not req.marker.evaluate(env)):
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        return exact[0] if len(exact) == 1 and len(req.specifier) == 1 else None
    return None


def download_wheel(version: str, dest: Path) -> Path:
    """``pip download --no-deps`` the Linux x86_64 wheel of ``vllm==version`` into ``dest``."""
    import subprocess

    dest.mkdir(parents=True, exist_ok=True)
    have = sorted(dest.glob(f"vllm-{version}-*.whl"))
    if have:
        return have[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_31_x86_64",
           "--platform", "manylinux_2_35_x86_64", "-d", str(dest), f"vllm=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    have = sorted(dest.glob(f"vllm-{version}-*.whl"))
    if proc.returncode != 0 or not have:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise VllmWheelError(f"version: pip could not download vllm=={version} from the package index this "
                             f"machine reaches ({last}); pass --wheel PATH to a vLLM wheel instead")
    return have[0]


def build_cache(version: str, wheel: str | os.PathLike | None = None, root: Path | None = None) -> Path:
    """Extract what the Marlin path needs from a vLLM wheel into ``root/<version>/``, all or nothing.

    Args:
        version: the vLLM release, e.g. ``"0.26.0"``; the wheel's name and METADATA must say the same.
        wheel: a local ``.whl``; None downloads it with pip into ``root/wheels/``.
        root: the cache folder (default :func:`cache_dir`).

    Returns:
        The cache folder. An existing complete cache of the same wheel is kept as it is.
    """
    root = Path(root) if root is not None else cache_dir()
    wheel_path = Path(wheel) if wheel is not None else download_wheel(version, root / "wheels")
    if not wheel_path.is_file():
        raise VllmWheelError(f"wheel: {wheel_path} does not exist")
    name, got, torch_pin = wheel_identity(wheel_path)
    if got != version:
        raise VllmWheelError(f"wheel: {wheel_path.name} is vllm {got}, but version {version} was asked for")
    final = root / version
    wheel_sha = _sha256(wheel_path)
    if final.exists():
        try:
            manifest = read_cache(final, version)
        except VllmWheelError:
            manifest = None
        if manifest is not None and manifest["wheel_sha256"] == wheel_sha:
            return final
        raise VllmWheelError(f"{final} already exists and is not a complete cache of {wheel_path.name}; "
                             f"move it away, then run {build_command(version)} again")
    tmp = root / f".{version}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        files = {}
        with zipfile.ZipFile(wheel_path) as z:
            for member in z.namelist():
                if not _wanted(member):
                    continue
                target = tmp / member
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(member) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                files[member] = _sha256(target)
        found = {m for m in files if _EXTENSION.match(m)}
        if len(found) != 2:
            raise VllmWheelError(f"wheel: {wheel_path.name} lacks vLLM's _C/_moe_C op extensions (found "
                                 f"{sorted(found) or 'none'}); a CUDA Linux x86_64 wheel is needed")
        manifest = {"schema": SCHEMA, "dist": name, "version": version, "torch_pin": torch_pin,
                    "wheel": wheel_path.name, "wheel_sha256": wheel_sha, "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_cache(folder: Path, version: str | None = None, verify: bool = True) -> dict:
    """The manifest of a complete cache folder, every file checked against its sha256.

    Raises:
        VllmWheelError: no manifest (half-written), another version or schema, a file missing or changed.
    """
    folder = Path(folder)
    ver = version or folder.name
    redo = f"delete {folder} and run {build_command(ver)}"
    path = folder / MANIFEST
    if not path.is_file():
        raise VllmWheelError(f"{folder} is not a complete vLLM wheel cache (no {MANIFEST}: half-written?); {redo}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise VllmWheelError(f"{path} is unreadable ({type(exc).__name__}); {redo}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise VllmWheelError(f"{path} is not a wheel-cache manifest; {redo}")
    if manifest.get("schema") != SCHEMA:
        raise VllmWheelError(f"{path} has schema {manifest.get('schema')!r}, this sm120lab reads {SCHEMA}; {redo}")
    if manifest.get("dist") != "vllm" or (version is not None and manifest.get("version") != version):
        raise VllmWheelError(f"{path} is a cache of {manifest.get('dist')} {manifest.get('version')}, "
                             f"expected vllm {version}; {redo}")
    if verify:
        for rel, digest in manifest["files"].items():
            f = folder / rel
            if not f.is_file():
                raise VllmWheelError(f"{folder} is incomplete: {rel} is missing; {redo}")
            if _sha256(f) != digest:
                raise VllmWheelError(f"{folder} is damaged: {rel} differs from the wheel's; {redo}")
    return manifest


def cached_versions(root: Path | None = None) -> list[str]:
    """Versions with a cache folder holding a manifest (complete or not), newest first."""
    from packaging.version import InvalidVersion, Version

    root = Path(root) if root is not None else cache_dir()
    out = []
    for d in root.glob("*/" + MANIFEST) if root.is_dir() else ():
        try:
            out.append((Version(d.parent.name), d.parent.name))
        except InvalidVersion:
            continue
    return [name for _, name in sorted(out, reverse=True)]


def torch_mismatch(torch_pin: str | None, torch_version: str) -> str | None:
    """None when the running torch is the release the wheel pins (local tags such as +cu130 aside)."""
    if not torch_pin:
        return None
    from packaging.version import Version

    if Version(torch_version).release != Version(torch_pin).release:
        return (f"torch ABI mismatch: vLLM's ops in this cache were built for torch=={torch_pin}, this "
                f"machine has torch {torch_version}; use the vLLM release that pins torch "
                f"{Version(torch_version).base_version} (data/upstream/vllm-*.json give each release's pin)")
    return None


# ----------------------------------------------------------------------------- carrying a cache in parts

PARTS_INDEX = "parts.json"


def pack_cache(folder: Path, dest: Path, part_mb: float = 34.0) -> list[Path]:
    """A complete cache as an xz-compressed tar cut into parts of at most ``part_mb`` MiB, for machines a
    cache reaches only in pieces (a device carry of 64 MiB with the working tree): ``dest/partNN/`` holds
    part NN, ``dest/part00/parts.json`` lists every part's sha256 and the stream's, so the parts can be
    carried separately and joined by :func:`unpack_parts`.

    Returns:
        The part folders, in order.
    """
    import lzma
    import tarfile

    folder = Path(folder)
    manifest = read_cache(folder)
    if part_mb <= 0:
        raise VllmWheelError(f"part_mb: expected a positive size in MiB, got {part_mb}")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise VllmWheelError(f"{dest} is not empty; pack into a new folder")
    tmp = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        stream = tmp / "stream.tar.xz"
        with lzma.open(stream, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tf:
            tf.add(folder, arcname=manifest["version"])
        size, limit = stream.stat().st_size, int(part_mb * (1 << 20))
        parts, index = [], {"schema": SCHEMA, "version": manifest["version"], "wheel": manifest["wheel"],
                            "stream_sha256": _sha256(stream), "parts": []}
        with open(stream, "rb") as f:
            for n in range((size + limit - 1) // limit):
                d = tmp / f"part{n:02d}"
                d.mkdir()
                (d / f"cache.tar.xz.{n:02d}").write_bytes(f.read(limit))
                index["parts"].append({"name": f"cache.tar.xz.{n:02d}", "sha256": _sha256(d / f"cache.tar.xz.{n:02d}")})
                parts.append(d)
        stream.unlink()
        (tmp / "part00" / PARTS_INDEX).write_text(json.dumps(index, indent=1))
        dest.mkdir(parents=True, exist_ok=True)
        for d in parts:
            os.replace(d, dest / d.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [dest / d.name for d in parts]


def unpack_parts(dirs: list[Path], root: Path | None = None) -> Path:
    """Join the parts :func:`pack_cache` wrote (found in any of ``dirs``), check every part's and the
    stream's sha256, extract into ``root`` (default :func:`cache_dir`) all or nothing, and verify the cache.

    Raises:
        VllmWheelError: an index or part missing or changed, or the extracted cache incomplete.
    """
    import lzma
    import tarfile

    found = {}
    for d in map(Path, dirs):
        for f in d.rglob("*") if d.is_dir() else ():
            if f.is_file():
                found.setdefault(f.name, f)
    if PARTS_INDEX not in found:
        raise VllmWheelError(f"parts: no {PARTS_INDEX} in {', '.join(map(str, dirs))} (it travels with part 00)")
    index = json.loads(found[PARTS_INDEX].read_text())
    missing = [p["name"] for p in index["parts"] if p["name"] not in found]
    if missing:
        raise VllmWheelError(f"parts: {', '.join(missing)} missing (carry every part folder, then run again)")
    for p in index["parts"]:
        if _sha256(found[p["name"]]) != p["sha256"]:
            raise VllmWheelError(f"parts: {p['name']} differs from the packed one (damaged in transit); carry it again")
    root = Path(root) if root is not None else cache_dir()
    final = root / index["version"]
    if final.exists():
        read_cache(final, index["version"])
        return final
    tmp = root / f".{index['version']}.unpack-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        joined = tmp / "stream.tar.xz"
        with open(joined, "wb") as out:
            for p in index["parts"]:
                with open(found[p["name"]], "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        if _sha256(joined) != index["stream_sha256"]:
            raise VllmWheelError("parts: the joined stream differs from the packed one; carry the parts again")
        with lzma.open(joined) as xz, tarfile.open(fileobj=xz, mode="r|") as tf:
            tf.extractall(tmp / "x", filter="data")
        joined.unlink()
        read_cache(tmp / "x" / index["version"], index["version"])
        os.replace(tmp / "x" / index["version"], final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# ----------------------------------------------------------------------------- importing from a cache


class _Inert(type):
    """Metaclass of the placeholders: any attribute, subscript or union of one is another placeholder."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__name__}.{name}")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


def _placeholder(name: str) -> type:
    return _Inert(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: self,
                             "__module__": "sm120lab.absent"})


class _AbsentModule(types.ModuleType):
    """A third-party module this machine lacks, named by vLLM's import chain but outside the kernel path."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _CacheFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``vllm.*`` from a cache folder (:data:`HOLLOW` packages without their ``__init__``) and,
    while ``stub_missing`` is on, absent third-party modules as :class:`_AbsentModule` (recorded)."""

    def __init__(self, root: Path):
        self.root = root
        self.stub_missing = False
        self.stubbed: list[str] = []

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top == "vllm":
            rel = self.root / name.replace(".", "/")
            if name in HOLLOW:
                spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
                spec.submodule_search_locations = [str(rel)]
                return spec
            return None  # the standard path finder, over the hollow packages' __path__
        if not self.stub_missing or top in sys.stdlib_module_names or not self._module_level_import():
            return None
        if top not in self.stubbed:
            if name != top or importlib.machinery.PathFinder.find_spec(top) is not None:
                return None
            self.stubbed.append(top)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def _module_level_import(self) -> bool:
        """True when the import runs at module level of a cached vLLM file. Imports inside functions
        (platform detection, ``has_*`` probes, ``find_spec``) must see absent modules as absent."""
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                     or frame.f_code.co_filename == importlib.util.__file__):
            frame = frame.f_back
        return (frame is not None and frame.f_code.co_name == "<module>"
                and frame.f_code.co_filename.startswith(str(self.root)))

    def create_module(self, spec):
        module = _AbsentModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


@dataclass
class MarlinRuntime:
    """vLLM's Marlin NVFP4 MoE entry points and where they came from."""

    fused_marlin_moe: object
    prepare_nvfp4_moe_layer_for_marlin: object
    float4_e2m1f_id: int
    silu: object
    version: str
    source: str  # "installed vllm" or "wheel cache <folder>"
    stubbed: list[str] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)  # op -> schema

    def notes(self) -> dict:
        return {"vllm": self.version, "vllm_source": self.source, "stubbed_modules": list(self.stubbed)}


_RUNTIME: MarlinRuntime | None = None


def _entry_points(stubbed: list[str], version: str, source: str, check_ops: bool = True) -> MarlinRuntime:
    from ..moe.backends.vllm_nvfp4 import first_importable

    fused = first_importable(MARLIN_MODULES, "fused_marlin_moe")
    prepare = importlib.import_module(PREPARE_MODULE).prepare_nvfp4_moe_layer_for_marlin
    silu = importlib.import_module(ACTIVATION_MODULE).MoEActivation.SILU
    e2m1 = importlib.import_module("vllm.scalar_type").scalar_types.float4_e2m1f.id
    return MarlinRuntime(fused, prepare, e2m1, silu, version, source, list(stubbed),
                         _op_schemas() if check_ops else {})


def _op_schemas() -> dict[str, str]:
    """Schema text of each required op; raises VllmWheelError naming the first one missing."""
    import torch

    out = {}
    for ns, names in REQUIRED_OPS.items():
        for op in names:
            try:
                out[f"{ns}.{op}"] = str(getattr(getattr(torch.ops, ns), op).default._schema)
            except (AttributeError, RuntimeError):
                raise VllmWheelError(f"torch.ops.{ns}.{op} is not registered: this vLLM's ops differ from the "
                                     f"Marlin path's ({', '.join(REQUIRED_OPS[ns])}); use vLLM 0.26.0") from None
    return out


def load_cache(folder: Path, version: str | None = None) -> MarlinRuntime:
    """Import vLLM's Marlin path from a complete cache folder (see the module docstring)."""
    import torch

    folder = Path(folder)
    manifest = read_cache(folder, version)
    why = torch_mismatch(manifest.get("torch_pin"), torch.__version__)
    if why:
        raise VllmWheelError(why)
    loaded = sys.modules.get("vllm")
    if loaded is not None and getattr(loaded, "__sm120lab_cache__", None) != str(folder):
        raise VllmWheelError(f"another vllm is already imported in this process ({getattr(loaded, '__path__', '?')}); "
                             f"use a fresh process for the wheel cache {folder}")
    finder = _CacheFinder(folder)
    sys.meta_path.insert(0, finder)
    if str(folder) not in sys.path:
        sys.path.append(str(folder))  # importlib.metadata finds the wheel's dist-info there
    finder.stub_missing = True
    try:
        vllm = importlib.import_module("vllm")
        vllm.__sm120lab_cache__ = str(folder)
        vllm.__version__ = manifest["version"]
        for ext in EXTENSION_MODULES:
            if importlib.util.find_spec(ext) is not None:
                try:
                    importlib.import_module(ext)
                except ImportError as exc:
                    raise VllmWheelError(f"{ext} does not load on this machine ({str(exc).splitlines()[0]}); "
                                         f"it needs torch {manifest.get('torch_pin')} with CUDA") from None
        runtime = _entry_points(finder.stubbed, manifest["version"], f"wheel cache {folder}")
    finally:
        finder.stub_missing = False
    return runtime


def marlin_runtime(version: str | None = None, root: Path | None = None) -> MarlinRuntime:
    """vLLM's Marlin path: the installed vLLM if it imports, else the newest (or ``version``) wheel cache.

    Raises:
        VllmWheelError: one line saying what to run.
    """
    global _RUNTIME
    if _RUNTIME is not None and (version is None or _RUNTIME.version == version):
        return _RUNTIME
    try:
        vllm = importlib.import_module("vllm")
    except ImportError:
        sys.modules.pop("vllm", None)
    else:  # an installed vLLM: its own import registered its ops; looked up per call, never cached
        return _entry_points([], str(getattr(vllm, "__version__", "?")), "installed vllm", check_ops=False)
    root = Path(root) if root is not None else cache_dir()
    versions = [version] if version else cached_versions(root)
    if not versions or not (root / versions[0]).is_dir():
        want = version or "0.26.0"
        raise VllmWheelError(f"vllm-marlin needs vLLM: pip install vllm, or build a wheel cache with "
                             f"`{build_command(want)}` (in {root}; $SM120LAB_VLLM_CACHE moves it)")
    _RUNTIME = load_cache(root / versions[0], versions[0])
    return _RUNTIME


def available(root: Path | None = None) -> str | None:
    """None when :func:`marlin_runtime` has something to try (vllm installed or a cache present), else why not."""
    if _RUNTIME is not None or importlib.util.find_spec("vllm") is not None:
        return None
    root = Path(root) if root is not None else cache_dir()
    if cached_versions(root):
        return None
    return (f"vLLM is not installed and no vLLM wheel cache is in {root} "
            f"(`{build_command('0.26.0')}` builds one)")
