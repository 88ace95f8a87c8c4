"""sm120lab: a research workbook for NVFP4 Mixture-of-Experts on NVIDIA SM120/SM121 GPUs.

Subpackages and modules (one concept each):

- :mod:`sm120lab.nvfp4`     -- the NVFP4 / MXFP4 number formats, bit-exact, in torch.
- :mod:`sm120lab.runs`      -- the run folder: execute the notebooks, report, archive, compare, results.
- :mod:`sm120lab.envinfo`   -- what machine and software a result came from.
- :mod:`sm120lab.atomic_io` -- atomic file writes used for every result and patched file.
"""

__version__ = "0.1.0"
