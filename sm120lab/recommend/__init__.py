"""The decision guide: what to set on an SM120/SM121 GPU, with the evidence for each item.

    from sm120lab import recommend
    items = recommend.guide(gpu="rtx-pro-6000")          # list[Item], the seed's setup by default
    recommend.show(recommend.section(items, "archflags"))  # HTML table in a notebook, rich in a terminal

- :func:`guide` fills ``data/recommendations.yaml`` for one GPU and setup; evidence levels are
  computed (:func:`evidence_of`) and lifted to ``sm120-run`` by archived SM120 run folders.
- :func:`section` keeps one topic (:class:`Topic`): archflags, versions, backend, patches, env,
  throughput, verify.
- the 120a-vs-120f item reads ``data/arch_suffix/``, recorded by ``sm120lab dev arch-suffix``
  (:mod:`sm120lab.devtools.arch_suffix`).
"""

from .core import (
    UNVERIFIED,
    Answer,
    Evidence,
    Item,
    RunFolder,
    Topic,
    answer,
    coverage,
    evidence_of,
    guide,
    load_rules,
    section,
    sm120_runs,
    to_json,
)
from .dothis import DoThis, answer_block, arch_list_for, build
from .render import show, to_markdown
from .setup import GPU, Fit, Setup, fit, resolve_setup

__all__ = ["Answer", "DoThis", "answer", "answer_block", "arch_list_for", "build", "Evidence", "Fit", "GPU", "Item", "RunFolder", "Setup", "Topic", "UNVERIFIED", "coverage", "evidence_of", "fit",
           "guide", "load_rules", "resolve_setup", "section", "show", "sm120_runs", "to_json", "to_markdown"]
