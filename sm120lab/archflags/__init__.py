"""The arch-flag compile lab: probe kernels x CUDA toolkits x targets, with SASS evidence.

Modules: :mod:`.targets` (sm_120a / compute_120f->sm_121a), :mod:`.probes` (the probe registry and
SASS evidence), :mod:`.cell` (one cached compile), :mod:`.matrix` (the parallel matrix + JSON),
:mod:`.triton_aot` / :mod:`.triton_probes` (Triton rows), :mod:`.summary` (tables, heatmap codes),
:mod:`.verdicts` (the seed report's claims, decided by cells), :mod:`.gpu_run` (run the probes on
a GPU and check numbers) with :mod:`.mma_block_scale_emulation` (the MMA's per-lane reference);
:mod:`.kernel_aot` (the production Triton MoE kernels compiled ahead of time: the AOT table). The
probe sources are ``cuda_probes/*.cu``. CLI: ``sm120lab archflags``.
"""

from .matrix import DEFAULT_JSON, resolve, run_matrix, write_matrix
from .probes import PROBES, get_probe
from .targets import DEFAULT_TARGETS, Target, default_targets, parse_target

__all__ = ["DEFAULT_JSON", "DEFAULT_TARGETS", "PROBES", "Target", "default_targets", "get_probe",
           "parse_target", "resolve", "run_matrix", "write_matrix"]
