"""Reading files out of a wheel without installing it: a local ``.whl`` or, for metadata-only records,
a wheel on PyPI read through HTTP range requests (only the zip directory and ``METADATA`` travel).

A wheel is a zip file; :class:`WheelSource` wraps :class:`zipfile.ZipFile` over either a local file or
:class:`HttpRangeFile`, a seekable read-only file whose reads are ``Range: bytes=a-b`` requests.
"""

from __future__ import annotations

import email.parser
import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

SIMPLE_URL = "https://pypi.org/simple/{name}/"
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json"

#: The environment the pins are evaluated for: a default (extra-less) install on Linux x86_64, CPython 3.12.
LINUX_X86_64_PY312 = {
    "implementation_name": "cpython", "implementation_version": "3.12.0", "os_name": "posix",
    "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
    "platform_system": "Linux", "platform_version": "", "python_full_version": "3.12.0",
    "python_version": "3.12", "sys_platform": "linux", "extra": "",
}


class HttpRangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file; each ``read`` is one HTTP range request."""

    def __init__(self, url: str, session=None):
        import requests

        self.url = url
        self.session = session or requests.Session()
        head = self.session.head(url, allow_redirects=True, timeout=60)
        head.raise_for_status()
        self.size = int(head.headers["Content-Length"])
        self.url = head.url
        self.pos = 0
        self.requests = 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if self.pos >= self.size:
            return b""
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        resp = self.session.get(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"}, timeout=120)
        resp.raise_for_status()
        self.requests += 1
        data = resp.content[: end - self.pos]
        self.pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


@dataclass
class WheelSource:
    """One wheel, opened: its file name, sha256, where it came from, and its zip contents."""

    filename: str
    sha256: str
    zf: zipfile.ZipFile
    url: str | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def local(cls, path: str | Path) -> WheelSource:
        """A ``.whl`` on disk (its sha256 computed from the file)."""
        path = Path(path)
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
        return cls(path.name, h.hexdigest(), zipfile.ZipFile(path))

    @classmethod
    def remote(cls, url: str, filename: str, sha256: str) -> WheelSource:
        """A wheel on an index, read by range requests; ``sha256`` is the index's listed hash."""
        return cls(filename, sha256, zipfile.ZipFile(HttpRangeFile(url)), url=url)

    def names(self) -> list[str]:
        return self.zf.namelist()

    def has(self, member: str) -> bool:
        return member in self._name_set()

    def _name_set(self) -> set[str]:
        if "names" not in self._cache:
            self._cache["names"] = set(self.zf.namelist())
        return self._cache["names"]

    def text(self, member: str) -> str | None:
        """The text of ``member`` (UTF-8), or None when the wheel lacks it."""
        if member not in self._name_set():
            return None
        if member not in self._cache:
            self._cache[member] = self.zf.read(member).decode("utf-8", errors="replace")
        return self._cache[member]

    def metadata_text(self) -> str:
        metas = [n for n in self.names() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        if len(metas) != 1:
            raise ValueError(f"wheel: expected one top-level .dist-info/METADATA in {self.filename}, found {metas}")
        return self.text(metas[0]) or ""


@dataclass
class Metadata:
    """The parts of a wheel's METADATA the records keep."""

    requires_python: str | None
    requires_dist: list[str]
    extras: dict[str, list[str]]


def parse_metadata(text: str) -> Metadata:
    """Requires-Python, Requires-Dist (raw, in file order) and, per Provides-Extra, the requirements whose
    marker names that extra."""
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    reqs = [str(r).strip() for r in msg.get_all("Requires-Dist") or []]
    extras: dict[str, list[str]] = {str(e).strip(): [] for e in msg.get_all("Provides-Extra") or []}
    for raw in reqs:
        for name in re.findall(r"""extra\s*==\s*["']([^"']+)["']""", raw):
            extras.setdefault(name, []).append(raw)
    rp = msg.get("Requires-Python")
    return Metadata(str(rp).strip() if rp else None, reqs, extras)


def default_install_requirements(requires_dist: list[str], env: dict | None = None) -> list[Requirement]:
    """The requirements a plain ``pip install <dist>`` takes on ``env`` (default: Linux x86_64, CPython 3.12,
    no extra): markers evaluated, unparsable lines skipped."""
    env = dict(LINUX_X86_64_PY312 if env is None else env)
    out = []
    for raw in requires_dist:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate(env):
            out.append(req)
    return out


def exact_pins(requires_dist: list[str], always: tuple[str, ...] = ("flashinfer-python", "torch")) -> dict[str, str]:
    """``{canonical name: specifier}`` for every default-install requirement pinned with ``==``, plus the
    ``always`` names whatever their specifier (``""`` when unconstrained)."""
    pins: dict[str, str] = {}
    for req in default_install_requirements(requires_dist):
        name = canonicalize_name(req.name)
        spec = str(req.specifier)
        if any(s.operator in ("==", "===") for s in req.specifier) or name in always:
            pins[name] = spec if name not in pins else ",".join(filter(None, [pins[name], spec]))
    return pins


def simple_index(name: str, session=None) -> dict:
    """PyPI's simple-API JSON for ``name`` (PEP 691)."""
    import requests

    s = session or requests
    resp = s.get(SIMPLE_URL.format(name=canonicalize_name(name)), headers={"Accept": SIMPLE_ACCEPT}, timeout=60)
    resp.raise_for_status()
    return json.loads(resp.text)


def released_versions(name: str, lo: str | None = None, hi: str | None = None) -> list[str]:
    """Final (non-pre-release) versions of ``name`` on PyPI with ``lo <= v <= hi``, ascending."""
    data = simple_index(name)
    out = []
    for v in data.get("versions", []):
        ver = Version(v)
        if ver.is_prerelease or ver.is_devrelease:
            continue
        if (lo is None or ver >= Version(lo)) and (hi is None or ver <= Version(hi)):
            out.append(ver)
    return [str(v) for v in sorted(set(out))]


def pick_remote_wheel(name: str, version: str, index: dict | None = None) -> tuple[str, str, str] | None:
    """``(url, filename, sha256)`` of the wheel of ``name==version`` to read metadata from: a CPython 3.12
    manylinux x86_64 wheel, else a pure-Python one, else any Linux x86_64 one; None when PyPI has none
    (or only yanked ones)."""
    index = index or simple_index(name)
    want = Version(version)
    cands = []
    for f in index.get("files", []):
        fn = f.get("filename", "")
        if not fn.endswith(".whl") or f.get("yanked"):
            continue
        try:
            _, ver, _, tags = parse_wheel_filename(fn)
        except Exception:
            continue
        if ver != want:
            continue
        tagset = {str(t) for t in tags}
        if any(t.startswith("cp312-cp312-manylinux") and t.endswith("x86_64") for t in tagset):
            rank = 0
        elif any(t.endswith("-none-any") for t in tagset):
            rank = 1
        elif any("linux" in t and t.endswith("x86_64") for t in tagset):
            rank = 2
        else:
            continue
        cands.append((rank, fn, f["url"], f.get("hashes", {}).get("sha256", "")))
    if not cands:
        return None
    rank, fn, url, sha = sorted(cands)[0]
    return url, fn, sha
