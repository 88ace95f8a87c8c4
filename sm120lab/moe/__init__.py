"""MoE correctness lab: problems, the exact reference, backends, diffs and verdicts.

- :mod:`.problem`    ``make_moe_problem`` (presets, routing distributions, NVFP4 weights)
- :mod:`.reference`  ``moe_reference`` (dequantized fp64/fp32 forward, the ground truth)
- :mod:`.backends`   the backend registry (one file per backend)
- :mod:`.diff`       error metrics, the NVFP4 error envelope and verdicts
- :mod:`.faults`     planted faulty backends (what "garbage" looks like)
"""

from .problem import PRESETS, ROUTINGS, MoEConfig, MoEProblem, make_moe_problem
from .reference import dequantize_expert, moe_reference, moe_reference_slots

__all__ = ["PRESETS", "ROUTINGS", "MoEConfig", "MoEProblem", "make_moe_problem", "dequantize_expert",
           "moe_reference", "moe_reference_slots"]
