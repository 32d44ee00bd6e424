"""Mirrors the parts of tensorrt_llm/llmapi/llm_args.py our adapter uses."""

from dataclasses import dataclass

# TorchLlmArgs field names (a subset of the real ~80): LLM(**kwargs) rejects any other name, as the real
# BaseLLM.__init__ does ("LLM got invalid argument: ...").
TORCH_LLM_ARGS_FIELDS = frozenset(
    {
        "model",
        "tokenizer",
        "tokenizer_mode",
        "skip_tokenizer_init",
        "trust_remote_code",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "dtype",
        "revision",
        "tokenizer_revision",
        "kv_cache_config",
        "max_batch_size",
        "max_num_tokens",
        "max_seq_len",
        "max_beam_width",
        "enable_chunked_prefill",
        "enable_iter_perf_stats",
        "iter_stats_max_iterations",
        "orchestrator_type",
        "cuda_graph_config",
        "stream_interval",
        "backend",
        "guided_decoding_backend",
    }
)


@dataclass(kw_only=True)
class KvCacheConfig:
    free_gpu_memory_fraction: float | None = 0.9
    enable_block_reuse: bool = True
    max_tokens: int | None = None
    tokens_per_block: int = 32
    host_cache_size: int | None = None
    event_buffer_max_size: int = 0  # "If set to 0, the event buffer will not be used."


@dataclass
class LlmArgs:
    """What LLM.args exposes after construction (a few fields)."""

    model: str
    tensor_parallel_size: int
    max_seq_len: int | None
    max_batch_size: int | None
    enable_iter_perf_stats: bool
    enable_chunked_prefill: bool = False  # BaseLlmArgs' default
    max_num_tokens: int | None = 8192  # BaseLlmArgs' default
    guided_decoding_backend: str | None = None  # Optional[Literal["xgrammar", "llguidance"]], default None
