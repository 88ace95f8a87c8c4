"""What an adapter claims about the package API it calls (the runtime half of the API check).

The records these claims point at are written and read by the developer tool
``sm120lab dev api-check`` (:mod:`sm120lab.devtools.api_check`); ``tests/test_backend_api.py`` binds
every adapter call against each checked version.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ApiClaim:
    """What an adapter claims about a package API: the versions its calls were checked against
    (each has a ``data/api/<dist>-<version>.json``), the lowest version it runs on, the targets it
    calls and the layout facts it relies on (ids of :data:`sm120lab.devtools.api_check.FACTS`)."""

    dist: str
    checked: tuple[str, ...]
    minimum: str
    #: target keys; a tuple inside is a set of alternatives (e.g. a module path that moved), one of
    #: which must exist in each checked version
    calls: tuple[str | tuple[str, ...], ...]
    facts: tuple[str, ...] = ()
    #: checked versions where a fact in ``facts`` is known absent and the adapter copes with it
    optional_facts: tuple[str, ...] = field(default=())
