"""Benchmarks: ``sm120lab bench moe`` (Triton NVFP4 MoE vs torch contenders, against measured
copy bandwidth and bf16 matmul rate). Modules: :mod:`.timing` (CUDA events, graphs, medians),
:mod:`.ceilings` (the two measured ceilings), :mod:`.moe_problem` (random NVFP4 weights at model
shape), :mod:`.contenders` (each implementation as a callable), :mod:`.moe` (the run and its JSON),
:mod:`.plot`, :mod:`.records` (typed bench documents), :mod:`.peer` (the production peer), :mod:`.lesson`
(notebook 07's tables, texts and live run).
"""
