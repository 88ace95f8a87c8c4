"""Decode roofline: bytes and FLOPs per decoded token, and the tok/s ceiling of a GPU setup.

- :mod:`.models`    model shapes (MoE presets + attention / linear-attention / vocab), with sources
- :mod:`.formats`   bits per parameter of NVFP4 (4.5), MXFP4 (4.25), FP8, BF16
- :mod:`.routing`   expected distinct experts per step, uniform (closed form) and Zipf
- :mod:`.decode`    per-step bytes/FLOPs by component
- :mod:`.ceiling`   TP x PP ceiling tok/s (memory vs compute floor, collectives, pipeline bubble)
- :mod:`.basis`     what a ceiling counts (weight formats, all-reduce latency) and its label
- :mod:`.hardware`  ``data/hardware.csv`` (+ the recorded bench ceilings); :mod:`.published`
  ``data/published/*.csv``; :mod:`.measured`  ``data/bench/moe_*.json`` (MoE-layer-only)
- :mod:`.lesson`    the tables of notebook 04 (ceilings per GPU, published vs ceiling, a
  prediction from a measured kernel efficiency)

Everything here is arithmetic on public specifications: a ceiling, not a prediction, and for
SM120 parts unverified on SM120 hardware.
"""

from .ceiling import Ceiling, ceiling, moe_layer_floor_us, resident_weight_bytes, tok_s_from_moe_layer_us
from .decode import PRECISION_PLANS, Precision, StepCost, precision_plan, step_cost
from .formats import BITS_PER_PARAM, bytes_per_param
from .hardware import GPUSpec, apply_bench_ceilings, get_gpu, load_gpus, load_hardware_table
from .models import PRESETS, ModelConfig, get_model
from .routing import (
                      expected_distinct,
                      expected_distinct_from_inclusion,
                      expected_distinct_uniform,
                      simulate_distinct_experts,
                      zipf_inclusion_probabilities,
                      zipf_weights,
)

__all__ = [
    "BITS_PER_PARAM", "Ceiling", "GPUSpec", "ModelConfig", "PRECISION_PLANS", "PRESETS", "Precision",
    "StepCost", "apply_bench_ceilings", "bytes_per_param", "ceiling", "expected_distinct",
    "expected_distinct_from_inclusion", "expected_distinct_uniform", "get_gpu", "get_model",
    "load_gpus", "load_hardware_table", "moe_layer_floor_us", "precision_plan",
    "resident_weight_bytes", "simulate_distinct_experts", "step_cost", "tok_s_from_moe_layer_us",
    "zipf_inclusion_probabilities", "zipf_weights",
]
