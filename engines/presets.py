"""Engine presets: named profiles (:class:`~engines.profile.EngineProfile`) by hardware, model and quantization.

The simulator (``python -m sim``) and the emulated backend (``backend: emulated``, ``preset: <name>``) take the
same names. Two kinds:

* **Roofline estimates** of the production variants of ``configs/gpu-trtllm.yaml`` on H200 (below).
* **Fitted to a measured engine** of ours: ``cpu-builtin-tiny`` / ``cpu-builtin-small`` (the transformers
  engine on this project's 2-core CPU machine) and ``h200-hf-random-llama-1b`` / ``-8b`` (the transformers
  engine on one H200), each from a committed bench run named in its ``source``.

No TensorRT-LLM run of these models has been measured by this project yet, so the GPU profiles are roofline
estimates (:class:`~engines.profile.Roofline`) from public model shapes and GPU data-sheet figures, with
every assumption stated below. Replace them with measured figures (``python -m sim calibrate`` checks
a profile against a real bench run) as soon as there are some.

Sources:

* Model shapes: Llama 3.1 model cards / ``config.json`` (meta-llama/Llama-3.1-8B-Instruct: 8.03 B
  parameters, 32 layers, 8 KV heads of 128; Llama-3.1-70B-Instruct: 70.6 B, 80 layers, 8 KV heads of 128).
* GPU: NVIDIA H200 SXM data sheet: 141 GB HBM3e at 4.8 TB/s; H100/H200 dense tensor peak ~989 TFLOP/s
  BF16/FP16 and ~1979 TFLOP/s FP8 (the data sheet's figures are with sparsity, i.e. twice these).
* Cross-check (approximate, from memory, not re-read here): NVIDIA's TensorRT-LLM "Performance Overview"
  page lists throughput for Llama 3.1 8B FP8 and 70B FP8 (TP2/TP4) on H100/H200 at several input/output
  lengths; at batch sizes like ours, single-stream decode of 8B lands at a few ms per token and 70B TP4
  near ten, the same order as the estimates below. Treat both as approximate.

Assumptions shared by the GPU estimates: 60% of HBM bandwidth achieved in decode, 40% of peak FLOP/s in
prefill, 2 ms per iteration of scheduling/sampling/launch overhead, an FP8 KV cache, an average running
sequence of 2048 tokens, 8 GB per GPU reserved for activations and the runtime, 90% of the rest to KV.
INT4 AWQ is weight-only (W4A16): its matmuls run at BF16 rates, its weights stream at half a byte.
Start-up times are guesses for a warm node with the checkpoint on local NVMe: 60 s for 4 GB of INT4
weights and engine warm-up, 180 s for 70 GB of FP8 weights loaded by four TP ranks, 240 s for 141 GB of
BF16 weights loaded by two.
"""

from __future__ import annotations

from typing import NamedTuple

from engines.profile import EngineProfile, Roofline

EMULATED_PREFIX = "emulated:"

H200_HBM_TB_PER_S = 4.8
H200_HBM_GB = 141.0
H100_H200_BF16_TFLOPS = 989.0
H100_H200_FP8_TFLOPS = 1979.0


class _Shape(NamedTuple):
    """What a roofline needs of a model (the docstring's sources): parameters in billions and the KV cache's shape."""

    params_b: float
    layers: int
    kv_heads: int
    head_dim: int


_LLAMA_3_1_8B = _Shape(params_b=8.03, layers=32, kv_heads=8, head_dim=128)
_LLAMA_3_1_70B = _Shape(params_b=70.6, layers=80, kv_heads=8, head_dim=128)


def _on_h200(model: _Shape, *, bytes_per_param: float, tp: int, tflops: float) -> Roofline:
    """``model``'s roofline on ``tp`` H200s, its weights at ``bytes_per_param``, its matmuls at ``tflops``."""
    return Roofline(
        **model._asdict(),
        bytes_per_param=bytes_per_param,
        tp=tp,
        hbm_tb_per_s=H200_HBM_TB_PER_S,
        hbm_gb=H200_HBM_GB,
        tflops=tflops,
    )


LLAMA_8B_INT4_H200 = _on_h200(
    _LLAMA_3_1_8B,
    bytes_per_param=0.5,
    tp=1,
    tflops=H100_H200_BF16_TFLOPS,  # W4A16: dequantized to BF16 for the matmuls
).profile(
    max_running_requests=128,  # configs/gpu-trtllm.yaml max_batch_size
    context_length=32768,
    startup_s=60.0,
    source="roofline estimate, Llama-3.1-8B INT4 AWQ on 1x H200 (engines/presets.py docstring)",
)

LLAMA_70B_FP8_TP4_H200 = _on_h200(_LLAMA_3_1_70B, bytes_per_param=1.0, tp=4, tflops=H100_H200_FP8_TFLOPS).profile(
    max_running_requests=96,  # configs/gpu-trtllm.yaml max_batch_size
    context_length=32768,
    startup_s=180.0,
    source="roofline estimate, Llama-3.1-70B FP8 tensor parallel 4 on 4x H200 (engines/presets.py docstring)",
)

# The same model unquantized on half the GPUs: a cheaper build whose decode step is three times slower, so
# that its TPOT reaches an interactive 50 ms target once its batch and prefill load grow.
LLAMA_70B_BF16_TP2_H200 = _on_h200(_LLAMA_3_1_70B, bytes_per_param=2.0, tp=2, tflops=H100_H200_BF16_TFLOPS).profile(
    max_running_requests=64,
    context_length=32768,
    startup_s=240.0,
    source="roofline estimate, Llama-3.1-70B BF16 tensor parallel 2 on 2x H200 (engines/presets.py docstring)",
)

# Fitted profiles. The decode step (a + b * (batch - 1)) and the prefill rate are the routing bench's calibration
# of each variant (``bench.calibration``: a lone stream's TPOT, a burst's TPOT, a long prompt's TTFT), measured
# through the whole stack; ``overhead_ms`` is its TTFT intercept (``base_ttft_ms``) less one decode step (what
# the stack adds). Limits are the variant's config: batch slots, KV blocks x page size, context, max_batch_tokens.

_CPU_ROUTING = "python -m bench routing --quick (its calibration, 2-core x86_64 CPU)"
CPU_BUILTIN_TINY = EngineProfile(
    source=f"transformers engine, builtin:tiny, 0.5-CPU replica of serve_config.yaml: {_CPU_ROUTING}",
    step_ms_at_batch_1=2.09,
    step_ms_per_extra_seq=0.93,
    prefill_tokens_per_s=56_437,
    max_num_tokens=256,  # engines/hf.py's CPU max_batch_tokens
    max_running_requests=16,
    kv_cache_tokens=16_384,  # 1024 blocks of 16: max(16 x 1024, 2 x context) tokens (engines/hf.py on CPU)
    context_length=1024,
    startup_s=10.0,  # a replica of serve_config.yaml loads the cached model in ~10 s on this machine
    overhead_ms=22.7,  # base TTFT 24.8 ms, less one step
)
CPU_BUILTIN_SMALL = EngineProfile(
    source=f"transformers engine, builtin:small, 0.5-CPU replica of serve_config.yaml: {_CPU_ROUTING}",
    step_ms_at_batch_1=6.01,
    step_ms_per_extra_seq=1.05,
    prefill_tokens_per_s=7_218,
    max_num_tokens=256,
    max_running_requests=16,
    kv_cache_tokens=16_384,
    context_length=4096,
    startup_s=12.0,
    overhead_ms=19.1,  # base TTFT 25.1 ms, less one step
)

_H200_ROUTING = (
    "python -m bench routing --quick --config configs/gpu-hf-two-variants-4k.yaml "
    "--rates 14 24 (its calibration, one H200 a variant)"
)
H200_HF_RANDOM_LLAMA_1B = EngineProfile(
    source=f"transformers engine, random:llama-1b bf16 on one H200: {_H200_ROUTING}",
    step_ms_at_batch_1=12.54,
    step_ms_per_extra_seq=1.89,
    prefill_tokens_per_s=112_602,
    max_num_tokens=8192,
    max_running_requests=128,
    kv_cache_tokens=128 * 4096,
    context_length=4096,
    startup_s=30.0,
    overhead_ms=24.0,  # base TTFT 36.5 ms, less one step
)
H200_HF_RANDOM_LLAMA_8B = EngineProfile(
    source=f"transformers engine, random:llama-8b bf16 on one H200: {_H200_ROUTING}",
    step_ms_at_batch_1=23.37,
    step_ms_per_extra_seq=2.81,
    prefill_tokens_per_s=23_592,
    max_num_tokens=8192,
    max_running_requests=128,
    kv_cache_tokens=128 * 4096,
    context_length=8192,
    startup_s=60.0,
    overhead_ms=13.3,  # base TTFT 36.6 ms, less one step
)

PRESETS: dict[str, EngineProfile] = {
    "h200-llama-3.1-8b-int4": LLAMA_8B_INT4_H200,
    "h200-llama-3.1-70b-fp8-tp4": LLAMA_70B_FP8_TP4_H200,
    "h200-llama-3.1-70b-bf16-tp2": LLAMA_70B_BF16_TP2_H200,
    "cpu-builtin-tiny": CPU_BUILTIN_TINY,
    "cpu-builtin-small": CPU_BUILTIN_SMALL,
    "h200-hf-random-llama-1b": H200_HF_RANDOM_LLAMA_1B,
    "h200-hf-random-llama-8b": H200_HF_RANDOM_LLAMA_8B,
}


def preset(name: str) -> EngineProfile:
    """The preset called ``name`` (with or without the ``emulated:`` prefix); KeyError naming the known ones."""
    key = name.removeprefix(EMULATED_PREFIX)
    try:
        return PRESETS[key]
    except KeyError:
        raise KeyError(f"unknown engine preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
