"""SM120 patch kit: declarative specs for FlashInfer / vLLM edits, an audit, and a safe applier.

* :mod:`.spec`     - the YAML spec format and loader (``specs/*.yaml``)
* :mod:`.site`     - find the installed package (or an unpacked wheel) and its version
* :mod:`.textmatch` - applicable / applied / anchor-missing / anchor-ambiguous, byte-exact
* :mod:`.engine`   - status, apply (backup + manifest + atomic writes), revert
* :mod:`.audit`    - the audit table rows; :func:`audit_available` audits what this machine has
* :mod:`.wheels`   - real wheel files (wheelhouse, cache or PyPI), extracted file by file
"""

from .audit import AvailableAudit, Origin, TreeAudit, audit_available

__all__ = ["AvailableAudit", "Origin", "TreeAudit", "audit_available"]
