"""Built-in engine profiles for the production variants (configs/gpu-trtllm.yaml) on H200, and the CPU one.

No GPU run of these models has been measured by this project yet, so the GPU profiles are roofline
estimates (:class:`~sim.profile.Roofline`) from public model shapes and GPU data-sheet figures, with
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

from sim.profile import EngineProfile, Roofline

H200_HBM_TB_PER_S = 4.8
H200_HBM_GB = 141.0
H100_H200_BF16_TFLOPS = 989.0
H100_H200_FP8_TFLOPS = 1979.0

LLAMA_8B_INT4_H200 = Roofline(
    params_b=8.03,
    bytes_per_param=0.5,
    layers=32,
    kv_heads=8,
    head_dim=128,
    tp=1,
    hbm_tb_per_s=H200_HBM_TB_PER_S,
    hbm_gb=H200_HBM_GB,
    tflops=H100_H200_BF16_TFLOPS,  # W4A16: dequantized to BF16 for the matmuls
).profile(
    max_running_requests=128,  # configs/gpu-trtllm.yaml max_batch_size
    context_length=32768,
    startup_s=60.0,
    source="roofline estimate, Llama-3.1-8B INT4 AWQ on 1x H200 (sim/profiles.py)",
)

LLAMA_70B_FP8_TP4_H200 = Roofline(
    params_b=70.6,
    bytes_per_param=1.0,
    layers=80,
    kv_heads=8,
    head_dim=128,
    tp=4,
    hbm_tb_per_s=H200_HBM_TB_PER_S,
    hbm_gb=H200_HBM_GB,
    tflops=H100_H200_FP8_TFLOPS,
).profile(
    max_running_requests=96,  # configs/gpu-trtllm.yaml max_batch_size
    context_length=32768,
    startup_s=180.0,
    source="roofline estimate, Llama-3.1-70B FP8 tensor parallel 4 on 4x H200 (sim/profiles.py)",
)

# The same model unquantized on half the GPUs: a cheaper build whose decode step is three times slower, so
# that its TPOT reaches an interactive 50 ms target once its batch and prefill load grow.
LLAMA_70B_BF16_TP2_H200 = Roofline(
    params_b=70.6,
    bytes_per_param=2.0,
    layers=80,
    kv_heads=8,
    head_dim=128,
    tp=2,
    hbm_tb_per_s=H200_HBM_TB_PER_S,
    hbm_gb=H200_HBM_GB,
    tflops=H100_H200_BF16_TFLOPS,
).profile(
    max_running_requests=64,
    context_length=32768,
    startup_s=240.0,
    source="roofline estimate, Llama-3.1-70B BF16 tensor parallel 2 on 2x H200 (sim/profiles.py)",
)

BUILTIN_PROFILES: dict[str, EngineProfile] = {
    "llama-8b-int4-h200": LLAMA_8B_INT4_H200,
    "llama-70b-fp8-tp4-h200": LLAMA_70B_FP8_TP4_H200,
    "llama-70b-bf16-tp2-h200": LLAMA_70B_BF16_TP2_H200,
}
