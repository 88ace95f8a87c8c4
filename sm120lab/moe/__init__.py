"""MoE correctness lab: problems, the exact reference, backends, diffs and verdicts.

- :mod:`.problem`    ``make_moe_problem`` (presets, routing distributions, NVFP4 weights, calibration)
- :mod:`.grouping`   ``grouped_moe_forward``: the one MoE loop every reference-style computation uses
- :mod:`.reference`  ``moe_reference`` (dequantized fp64/fp32 forward, the ground truth)
- :mod:`.backends`   the backend registry (one file per backend)
- :mod:`.metrics`, :mod:`.envelope`, :mod:`.verdict`  error metrics, the NVFP4 error envelope, verdicts
- :mod:`.harness`    ``check(problem, backends)``; ``default_device()`` (the GPU when there is one)
- :mod:`.faults`     planted faulty backends (what "garbage" looks like)
- :mod:`.variants`   correct-but-different backends (what must never be called garbage)
- :mod:`.sweep`      the false-alarm sweep over many random problems
"""

from .problem import PRESETS, ROUTINGS, MoEConfig, MoEProblem, make_moe_problem
from .reference import dequantize_expert, moe_reference, moe_reference_slots
from .verdict import Verdict

__all__ = ["PRESETS", "ROUTINGS", "MoEConfig", "MoEProblem", "Verdict", "make_moe_problem", "dequantize_expert",
           "moe_reference", "moe_reference_slots"]
