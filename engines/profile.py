"""An engine performance model: how fast one replica of a variant prefills, decodes, and how much it holds.

One model of an engine's time, two clocks: the simulator (``sim/``) steps it in virtual time and the emulated
backend (:mod:`engines.emulated`) on the real clock; both admit and plan iterations with
:class:`engines.batching.ContinuousBatch`, so there is one answer to "who runs" and "how long it takes".

One replica is a continuous-batching engine that runs in *iterations*: each iteration decodes one token
for every running sequence and prefills up to a token budget of waiting prompt tokens (chunked prefill,
as TensorRT-LLM and vLLM do). Its duration is linear in the work::

    step_ms = step_ms_at_batch_1 + step_ms_per_extra_seq * (decoding - 1) + prefill_ms_per_token * chunk

so TPOT = step time with no prefill = a + b * (batch - 1), and TTFT = the queued prefill work ahead of a
request and its own prompt, in budget-sized chunks, plus the decode steps those chunks share. The same
shape as the router's :class:`~router.latency.LatencyModel`, which lets ``sim.seed.router_seed`` seed the
router with what the modelled engine really does (as a measured profile would in production).
"""

from __future__ import annotations

from pydantic import Field

from core.config import StrictModel


class EngineProfile(StrictModel):
    """The speed and limits of one replica of a variant; see the module docstring for the step model."""

    source: str = Field("", description="Where the figures come from: a bench run, a paper, a roofline estimate.")
    gpus_per_replica: int = Field(1, ge=1, description="GPUs one replica holds (its tensor-parallel size).")
    step_ms_at_batch_1: float = Field(
        gt=0, description="One iteration decoding a single sequence: the TPOT of a lone stream, in ms."
    )
    step_ms_per_extra_seq: float = Field(
        ge=0, description="What each further decoding sequence adds to an iteration (KV reads, compute), in ms."
    )
    prefill_tokens_per_s: float = Field(gt=0, description="Prompt tokens per second when an iteration prefills.")
    max_num_tokens: int = Field(
        8192,
        ge=1,
        description="Token budget of one iteration (decode tokens + prefill chunk): TRT-LLM's max_num_tokens.",
    )
    max_running_requests: int = Field(ge=1, description="Batch slots: sequences that may run at once.")
    kv_cache_tokens: int = Field(
        ge=1,
        description="Tokens the KV cache holds. A request is admitted only when prompt + max_tokens fit "
        "(TensorRT-LLM's default GUARANTEED_NO_EVICT scheduler reserves the whole sequence).",
    )
    context_length: int = Field(ge=2, description="Prompt + output tokens one sequence may hold.")
    block_reuse: bool = Field(
        True,
        description="Whether finished prompts' KV blocks are kept and reused by later prompts that start with them "
        "(TensorRT-LLM's KvCacheConfig.enable_block_reuse, on by default; engines/prefix_cache.py).",
    )
    kv_block_tokens: int = Field(
        32, ge=1, description="Tokens per KV cache block: the unit of reuse (TensorRT-LLM's tokens_per_block)."
    )
    startup_s: float = Field(
        60.0, ge=0, description="From a replica being added to it serving: placement, weight load, warm-up."
    )
    overhead_ms: float = Field(
        2.0,
        ge=0,
        description="Fixed time a request spends outside the engine before its first token reaches the "
        "client: ingress, routing, the Serve hops and streaming. The simulator adds it; the emulated engine "
        "does not (the real stack around it spends its own).",
    )

    @property
    def prefill_ms_per_token(self) -> float:
        return 1000.0 / self.prefill_tokens_per_s

    def step_ms(self, decoding: int, prefill_tokens: int) -> float:
        """Duration of one iteration that decodes ``decoding`` sequences and prefills ``prefill_tokens``."""
        return (
            self.step_ms_at_batch_1
            + self.step_ms_per_extra_seq * max(decoding - 1, 0)
            + self.prefill_ms_per_token * prefill_tokens
        )


class Roofline(StrictModel):
    """A first-principles estimate of a decoder-only transformer's speed on one tensor-parallel group.

    Decode is bound by HBM bandwidth (every step reads all weights once, and each sequence's KV cache);
    prefill is bound by matrix FLOPs (2 x parameters per token). Achieved fractions of the peaks are
    assumptions, stated per field; real engines land within tens of percent of such estimates.
    """

    params_b: float = Field(gt=0, description="Parameters, in billions.")
    bytes_per_param: float = Field(gt=0, description="Weight bytes per parameter: 0.5 INT4, 1 FP8, 2 BF16.")
    layers: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    kv_bytes: float = Field(1.0, gt=0, description="Bytes per KV element (1 for an FP8 KV cache).")
    tp: int = Field(1, ge=1, description="Tensor-parallel GPUs.")
    hbm_tb_per_s: float = Field(gt=0, description="HBM bandwidth per GPU: H100 SXM 3.35, H200 4.8 TB/s.")
    hbm_gb: float = Field(gt=0, description="HBM per GPU: H100 80, H200 141 GB.")
    tflops: float = Field(
        gt=0, description="Dense tensor TFLOP/s per GPU at the compute precision: H100/H200 ~989 BF16, ~1979 FP8."
    )
    bandwidth_efficiency: float = Field(0.6, gt=0, le=1, description="Achieved fraction of HBM bandwidth.")
    compute_efficiency: float = Field(0.4, gt=0, le=1, description="Achieved fraction of peak FLOP/s in prefill.")
    step_overhead_ms: float = Field(
        2.0, ge=0, description="Per-iteration cost beyond the roofline: scheduling, sampling, kernel launches."
    )
    allreduce_ms_per_layer: float = Field(
        0.02, ge=0, description="Tensor-parallel all-reduces of one layer's decode step (two per layer)."
    )
    mean_context_tokens: float = Field(
        2048.0, gt=0, description="Average tokens in a running sequence's KV cache, for its per-step reads."
    )
    memory_reserved_gb: float = Field(
        8.0, ge=0, description="Per-GPU memory for activations, CUDA graphs and the runtime, not KV cache."
    )
    kv_memory_fraction: float = Field(0.9, gt=0, le=1, description="free_gpu_memory_fraction given to KV.")

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes  # K and V

    def profile(
        self,
        *,
        max_running_requests: int,
        context_length: int,
        startup_s: float,
        max_num_tokens: int = 8192,
        source: str = "",
    ) -> EngineProfile:
        bandwidth = self.tp * self.hbm_tb_per_s * 1e12 * self.bandwidth_efficiency  # bytes/s of the group
        weight_bytes = self.params_b * 1e9 * self.bytes_per_param
        weights_ms = 1e3 * weight_bytes / bandwidth
        allreduce_ms = 0.0 if self.tp == 1 else self.layers * self.allreduce_ms_per_layer
        flops_per_token = 2 * self.params_b * 1e9
        flops = self.tp * self.tflops * 1e12
        # Each extra sequence reads its KV cache and does its share of the (small-batch, bandwidth-bound)
        # matmuls' compute; at decode batch sizes the compute term is tiny but not zero.
        per_seq_ms = 1e3 * (
            self.mean_context_tokens * self.kv_bytes_per_token / bandwidth + flops_per_token / (flops * 0.5)
        )
        kv_memory = self.tp * (self.hbm_gb - weight_bytes / 1e9 / self.tp - self.memory_reserved_gb)
        kv_tokens = int(max(kv_memory, 1.0) * 1e9 * self.kv_memory_fraction / self.kv_bytes_per_token)
        return EngineProfile(
            source=source,
            gpus_per_replica=self.tp,
            step_ms_at_batch_1=weights_ms + allreduce_ms + self.step_overhead_ms,
            step_ms_per_extra_seq=per_seq_ms,
            prefill_tokens_per_s=flops * self.compute_efficiency / flops_per_token,
            max_num_tokens=max_num_tokens,
            max_running_requests=max_running_requests,
            kv_cache_tokens=kv_tokens,
            context_length=context_length,
            startup_s=startup_s,
        )
