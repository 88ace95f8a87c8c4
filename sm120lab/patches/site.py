"""Find the site-packages root that holds a distribution, and its version.

The root is the directory that contains the import package (``<root>/flashinfer/``) and its
``<dist>-<version>.dist-info/``: an installed site-packages (found through
``importlib.util.find_spec``, which does not import the package) or an unpacked wheel given
with ``--site``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name


class SiteError(RuntimeError):
    """The package or its version could not be found (message says where we looked)."""


@dataclass(frozen=True)
class SiteTree:
    root: Path       # directory holding <import_name>/ and the dist-info
    package: str     # distribution name
    version: str
    installed: bool  # found through the running interpreter (not --site)


def dist_info_version(root: Path, package: str) -> str | None:
    """Version from ``<root>/<package>-*.dist-info/METADATA`` (name compared PEP 503-style)."""
    want = canonicalize_name(package)
    for d in sorted(Path(root).glob("*.dist-info")):
        meta = d / "METADATA"
        if not meta.is_file():
            continue
        headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
        if canonicalize_name(headers.get("Name", "")) == want and headers.get("Version"):
            return headers["Version"].strip()
    return None


def locate(package: str, import_name: str, site: str | Path | None = None) -> SiteTree:
    """The tree to inspect: ``site`` if given, else the one this interpreter imports."""
    if site is not None:
        root = Path(site).expanduser().resolve()
        if not root.is_dir():
            raise SiteError(f"--site: {root} is not a directory (expected the unpacked wheel / "
                            f"site-packages root that holds {import_name}/)")
        if not (root / import_name).is_dir():
            hint = ""
            if root.name == import_name and (root.parent / import_name).is_dir():
                hint = f" (did you mean --site {root.parent}?)"
            raise SiteError(f"--site: {root} has no {import_name}/ directory{hint}; pass the directory "
                            f"that contains {import_name}/ and its .dist-info")
        version = dist_info_version(root, package)
        if version is None:
            raise SiteError(f"--site: no {package}-*.dist-info/METADATA with a Version under {root}")
        return SiteTree(root, package, version, installed=False)
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        raise SiteError(f"{package} is not installed in this interpreter (no importable "
                        f"'{import_name}'); pass --site DIR to inspect an unpacked wheel instead")
    pkg_dir = Path(list(spec.submodule_search_locations)[0]).resolve()
    root = pkg_dir.parent
    version = dist_info_version(root, package)
    if version is None:
        from importlib import metadata
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            raise SiteError(f"'{import_name}' imports from {pkg_dir} but no {package} "
                            f"dist-info was found: is it a source checkout? pass --site") from None
    return SiteTree(root, package, version, installed=True)
