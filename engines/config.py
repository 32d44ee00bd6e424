"""Typed engine configurations, one per backend, selected by the ``backend`` field.

These are the single source of truth for engine settings: the serve config embeds them per variant,
the engine factory builds engines from them, the bench builds the same engines in-process from them.
"""

from __future__ import annotations

import math
import os
import string
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from core.config import StrictModel
from engines.presets import EMULATED_PREFIX, PRESETS
from engines.profile import EngineProfile
from engines.protocol import GUIDED_FIELDS, SAMPLING_FIELDS

# The optional sampling fields (engines.protocol.SAMPLING_FIELDS) each backend implements; docs/openai-api.md has
# the table. transformers' continuous batching takes per request only temperature, top_p and top_k
# (cb_logits_processors.py: its per-request processors), and one seed for the whole batch loop.
# torch CPU threads of an hf engine on a GPU replica at least (HFEngineConfig.for_replica). Measured on 16-core GPU
# hosts, random:llama-1b: 1 / 4 / 8 threads made 1,415 / 1,563 / 1,663 tokens/s; at 256 streams the
# engine child with 8 stepped 3-9% slower than the engine alone with torch's default of 16, and with 16 it matched it
# (docs/streaming.md). 16 per GPU is also what an 8-GPU host's cores give each of its GPUs.
GPU_ENGINE_MIN_THREADS = 16
HF_SAMPLING_FIELDS = frozenset({"top_k", "ignore_eos", "stop_token_ids"})
# The emulated engine has no logits: it honours what changes where its walk through the text goes and ends.
EMULATED_SAMPLING_FIELDS = frozenset({"seed", "top_k", "ignore_eos", "stop_token_ids", "min_tokens"})
# tensorrt_llm.SamplingParams fields (sampling_params.py); logit_bias is its embedding_bias (a float tensor of the
# vocabulary's size, built as trtllm-serve builds it). Guided decoding only with a guided_decoding_backend.
TRTLLM_SAMPLING_FIELDS = SAMPLING_FIELDS - GUIDED_FIELDS
# An OpenAI server takes OpenAI's own fields; the vLLM / trtllm-serve extensions only with sampling_extensions,
# response_format only with structured_output. Not best_of: this backend streams, and a best_of answer is only known
# once every sequence has finished (TensorRT-LLM re-ranks a request's outputs at every read, result.py outputs).
OPENAI_SAMPLING_FIELDS = frozenset({"seed", "presence_penalty", "frequency_penalty", "logit_bias"})
# TensorRT-LLM's grammar backends (llm_args.py: guided_decoding_backend: Optional[Literal["xgrammar",
# "llguidance"]], "llguidance is supported in PyTorch backend only").
GuidedDecodingBackend = Literal["xgrammar", "llguidance"]
# logprobs is OpenAI's own, but only servers known to stream it per chunk (trtllm-serve, vLLM) are asked for it: a
# server that accepted it and sent none would leave it silently dropped (the adapter then fails the request).
OPENAI_EXTENSION_FIELDS = frozenset(
    {"top_k", "ignore_eos", "stop_token_ids", "repetition_penalty", "min_tokens", "logprobs"}
)


class CoalesceConfig(StrictModel):
    """How the engine replica gathers tokens before sending them through Ray (docs/streaming.md)."""

    interval_ms: float = Field(
        50.0,
        ge=0,
        le=1000,
        description="The stream interval: after the first token (always sent at once), a stream's next message "
        "carries everything the engine made for it since, sent before any of it has waited this long: at the last "
        "engine step that keeps to it where the engine knows when its next step ends (emulated), else on a timer "
        "at that time (hf, trtllm, openai_server), or at the first step after it (the engine_process relay). The "
        "last token also goes at once. 0 sends every engine step on its own: for a client that counts one token "
        "per SSE event. 50 ms measured a third to half less serving CPU per token than 0-20 ms at no cost to TTFT "
        "(docs/streaming.md).",
    )


class HFEngineConfig(StrictModel):
    """The embedded engine: transformers continuous batching, on CPU or CUDA."""

    backend: Literal["hf"] = "hf"

    def sampling_fields(self) -> frozenset[str]:
        """The optional sampling fields this backend implements (engines.protocol.SAMPLING_FIELDS)."""
        return HF_SAMPLING_FIELDS

    def for_replica(self, num_cpus: float, num_gpus: float) -> HFEngineConfig:
        """This config with ``num_threads`` chosen for a replica of that reservation, unless it was set.

        On the GPU the batch loop's CPU side (building each iteration's inputs, the sampling processors) still
        runs torch CPU ops, and Ray's one OpenMP thread makes the engine measurably slower (docs/streaming.md),
        so a GPU replica gets ``GPU_ENGINE_MIN_THREADS`` (or the host's CPUs, if fewer) even when it reserves one.
        """
        if self.num_threads is not None:
            return self
        threads = max(1, math.ceil(num_cpus))
        if num_gpus > 0:
            threads = max(threads, min(GPU_ENGINE_MIN_THREADS, os.cpu_count() or 1))
        return self.model_copy(update={"num_threads": threads})

    model: str = Field(
        description="'builtin:<name>' (generated offline, see engines/builtin.py), a local Hugging Face "
        "checkpoint directory, or a hub id where a hub is reachable."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' picks cuda when a GPU is visible to the replica, else cpu."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="'auto' is bfloat16 on CUDA and float32 on CPU."
    )
    num_threads: int | None = Field(
        None,
        ge=1,
        description="torch CPU threads. Ray sets OMP_NUM_THREADS=1 in replicas with fractional CPUs, "
        "so the default (None) uses the replica's reserved CPUs rounded up, and at least "
        f"{GPU_ENGINE_MIN_THREADS} (or the machine's CPUs, if fewer) on a replica with a GPU.",
    )
    max_running_requests: int = Field(
        32, ge=1, le=4096, description="Sequences decoded together in one batch (continuous batching)."
    )
    max_queued_requests: int = Field(
        256,
        ge=0,
        description="Requests accepted but not yet running; beyond this the engine answers overloaded (429).",
    )
    max_batch_tokens: int | None = Field(
        None, ge=16, description="Tokens processed per forward step (prefill chunking); None lets transformers pick."
    )
    num_blocks: int | None = Field(
        None, ge=1, description="KV cache blocks; None lets transformers size the cache from free memory."
    )
    page_size: int = Field(16, ge=1, description="Tokens per KV cache block.")
    context_length: int | None = Field(
        None, ge=16, description="Cap on prompt + output tokens; None uses the model's max_position_embeddings."
    )
    attn_implementation: str | None = Field(
        None, description="Override transformers' attention kernel (for example 'sdpa_paged')."
    )
    seed: int = Field(0, description="Seed of the engine's sampler (transformers CB has one generator).")
    hang_timeout_s: float = Field(
        120.0,
        gt=0,
        description="The health check fails when requests are waiting or running but the batch loop has not "
        "completed a step for this long (a hung engine), so Serve replaces the replica.",
    )
    engine_process: bool = Field(
        True,
        description="Run the batch loop in its own process (engines/process.py) so that the replica's Serve machinery "
        "(its event loop, gRPC streams) does not share the batch loop's interpreter lock; the replica only relays "
        "messages. On by default: the stack streams more tokens per second with it on CPU and on GPU "
        "(docs/streaming.md). Off saves one process per replica (it imports torch and loads the model: a few "
        "seconds more at start, a few hundred MB).",
    )
    coalesce: CoalesceConfig = Field(default_factory=CoalesceConfig)


# What a variant declares about its weights; engines/checkpoint.py checks it against the checkpoint files
# (a variant declared float16 but pointed at FP8 or INT4 weights serves garbage, so it must not start).
Quantization = Literal[
    "none",  # unquantized weights (in ``dtype``)
    "fp8",  # FP8 weights (ModelOpt FP8, per-channel or block scales)
    "nvfp4",  # NVFP4 (Blackwell)
    "int4_awq",  # INT4 weights, AWQ (ModelOpt W4A16_AWQ, HF quant_method 'awq')
    "w4a8_awq",  # INT4 weights with FP8 activations, AWQ
    "int8_sq",  # INT8 weights and activations, SmoothQuant
    "int8_weight_only",  # INT8 weights, 16-bit activations
    "int4_weight_only",  # INT4 weights, 16-bit activations (no AWQ / GPTQ)
    "int4_gptq",  # INT4 weights, GPTQ
]

DeclaredDtype = Literal["auto", "float16", "bfloat16", "float32"]

_QUANTIZATION_DESCRIPTION = (
    "The weights' quantization as the checkpoint must carry it (TensorRT-LLM reads it from the checkpoint; this "
    "field states it again so that a wrong path is refused at start instead of serving garbage). None: when dtype "
    "is not 'auto', the variant declares unquantized weights in that dtype; otherwise nothing is checked."
)


# KV cache events TensorRT-LLM buffers between two reads, where the project turns them on: the replica drains them
# several times a second, and even a burst of long prompts stores a few hundred blocks per read.
DEFAULT_KV_EVENT_BUFFER = 2048


class KvCacheSettings(StrictModel):
    """TensorRT-LLM's KV cache settings (``tensorrt_llm.llmapi.KvCacheConfig``)."""

    free_gpu_memory_fraction: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Fraction of the GPU memory left free after loading the weights that the KV cache takes.",
    )
    enable_block_reuse: bool = Field(
        True, description="Reuse KV cache blocks across requests sharing a prefix (prefix caching)."
    )
    max_tokens: int | None = Field(
        None, ge=1, description="Upper bound on the tokens the KV cache holds; None sizes it from memory alone."
    )
    event_buffer_max_size: int = Field(
        DEFAULT_KV_EVENT_BUFFER,
        ge=0,
        description="KV cache events TensorRT-LLM buffers between two reads (KvCacheConfig.event_buffer_max_size; "
        "its own default 0 turns them off). The replica reads them a few times a second and tells the router "
        "which prompt blocks it holds, so requests sharing a prefix go where it is cached (precise prefix "
        "routing); a full buffer drops its oldest events, and the replica then forgets the blocks it can no longer "
        "vouch for. 0 turns the events off: the router then approximates each replica's cache from the requests "
        "it sent there. Needs enable_block_reuse.",
    )
    tokens_per_block: int = Field(
        32,
        ge=1,
        description="Tokens per KV cache block (KvCacheConfig.tokens_per_block, TensorRT-LLM's default 32): the "
        "unit of reuse, and of the block hashes the router compares. A prebuilt engine directory's own "
        "build_config.plugin_config.tokens_per_block wins.",
    )

    @model_validator(mode="after")
    def _events_need_block_reuse(self) -> KvCacheSettings:
        # TensorRT-LLM reports stored and removed blocks only where it reuses them (llm.py get_kv_cache_events: "set
        # enable_block_reuse to True"); without reuse the router would wait for events that never come.
        if self.event_buffer_max_size > 0 and not self.enable_block_reuse:
            raise ValueError(
                f"event_buffer_max_size: is {self.event_buffer_max_size}, but KV cache events need "
                "enable_block_reuse: true. Turn block reuse on, or set event_buffer_max_size: 0 (the router then "
                "approximates this variant's prefix cache)"
            )
        return self

    @property
    def kv_events(self) -> bool:
        """Whether TensorRT-LLM is asked for KV cache events."""
        return self.event_buffer_max_size > 0


class TRTLLMEngineConfig(StrictModel):
    """TensorRT-LLM in-process (``tensorrt_llm.LLM``): needs tensorrt_llm importable beside ray[serve]."""

    backend: Literal["trtllm"] = "trtllm"

    def sampling_fields(self) -> frozenset[str]:
        """The optional sampling fields this backend implements (engines.protocol.SAMPLING_FIELDS)."""
        return TRTLLM_SAMPLING_FIELDS | (GUIDED_FIELDS if self.guided_decoding_backend else frozenset())

    model: str = Field(
        description="A Hugging Face checkpoint directory (pre-quantized ModelOpt exports carry their "
        "quantization), a hub id where a hub is reachable, or a prebuilt TensorRT engine directory "
        "(trtllm-build output, loaded through tensorrt_llm._tensorrt_engine.LLM where the installed version "
        "still has it)."
    )
    tokenizer: str | None = Field(
        None, description="Tokenizer directory or id; None uses the model's (engine directories need one)."
    )
    engine_format: Literal["auto", "pytorch", "tensorrt_engine"] = Field(
        "auto",
        description="'pytorch': tensorrt_llm.LLM (the 1.x default). 'tensorrt_engine': a prebuilt engine "
        "directory through the legacy backend. 'auto' picks tensorrt_engine when the model directory's "
        "config.json has a build_config.",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="GPUs one replica shards the model over. The replica must reserve as many GPUs "
        "(num_gpus); TensorRT-LLM's MPI workers inherit its CUDA_VISIBLE_DEVICES.",
    )
    dtype: DeclaredDtype = Field(
        "auto", description="Activation / unquantized weight dtype; 'auto' takes the checkpoint's."
    )
    quantization: Quantization | None = Field(None, description=_QUANTIZATION_DESCRIPTION)
    max_batch_size: int | None = Field(
        None, ge=1, description="Requests scheduled together; None keeps TensorRT-LLM's default."
    )
    max_num_tokens: int | None = Field(
        None, ge=1, description="Tokens in one forward step (all requests); None keeps TensorRT-LLM's default."
    )
    max_seq_len: int | None = Field(
        None,
        ge=16,
        description="Longest prompt + output; None uses the checkpoint's (max_position_embeddings, or the "
        "engine's build max_seq_len). Must not exceed the model's.",
    )
    enable_chunked_prefill: bool = Field(
        True,
        description="Split long prompts over several steps so that decoding requests keep flowing. On by default "
        "(TensorRT-LLM's default is off): without it the PyTorch backend refuses every prompt longer than "
        "max_num_tokens (llm.py _check_arguments), so turning it off needs max_num_tokens >= the longest prompt.",
    )
    kv_cache: KvCacheSettings = Field(default_factory=KvCacheSettings)
    guided_decoding_backend: GuidedDecodingBackend | None = Field(
        None,
        description="The grammar backend TensorRT-LLM builds its guided decoder with (LLM(guided_decoding_backend="
        "...)): set it to serve structured output (response_format json_schema / json_object, and tool calls that "
        "tool_choice requires). None: such requests are refused with a 400 naming the field, since without a "
        "guided decoder TensorRT-LLM cannot enforce them. 'llguidance' needs engine_format 'pytorch'.",
    )
    stats_interval_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often the replica drains TensorRT-LLM's iteration stats (KV use, active requests).",
    )
    stats_timeout_s: float = Field(
        10.0,
        gt=0,
        description="How long one read of TensorRT-LLM's iteration stats waits for a new entry. Must exceed the "
        "slowest iteration: TensorRT-LLM's stats iterator is one object per LLM that, once a read times out, "
        "stays finished until the next request is submitted (IterationResult._done, mark_undone).",
    )
    extra_llm_args: dict[str, Any] = Field(
        default_factory=dict,
        description="More keyword arguments for tensorrt_llm.LLM (TorchLlmArgs fields, e.g. "
        "cuda_graph_config); they override the ones built from the fields above.",
    )
    coalesce: CoalesceConfig = Field(default_factory=CoalesceConfig)

    @model_validator(mode="after")
    def _guided_decoding_is_said_once(self) -> TRTLLMEngineConfig:
        # The guided decoder is the LLM's (one per engine), so the variant says whether it serves structured output
        # in one place: the router reads that field, and an extra_llm_args copy could contradict it.
        if "guided_decoding_backend" in self.extra_llm_args:
            raise ValueError(
                "guided_decoding_backend: set it as the engine's own field (engine.guided_decoding_backend), not in "
                "extra_llm_args: the router reads the field to send structured-output requests only here"
            )
        if self.guided_decoding_backend == "llguidance" and self.engine_format == "tensorrt_engine":
            raise ValueError(
                "guided_decoding_backend: 'llguidance' is supported by TensorRT-LLM's PyTorch backend only; use "
                "'xgrammar' with engine_format 'tensorrt_engine'"
            )
        return self

    def trtllm_loader(self) -> Literal["pytorch", "tensorrt", "auto"]:
        """Which TensorRT-LLM backend loads the model (engines/checkpoint.py checks it can)."""
        return {"auto": "auto", "pytorch": "pytorch", "tensorrt_engine": "tensorrt"}[self.engine_format]  # type: ignore[return-value]

    def prefill_token_limit(self) -> int | None:
        """The longest prompt TensorRT-LLM accepts, or None for no limit of its own (chunked prefill).

        The PyTorch backend without chunked prefill refuses a prompt above max_num_tokens (llm.py
        ``_check_arguments``: "The sum of prompt length ... should not exceed max_num_tokens"). The legacy engine
        backend splits prompts by its build instead; it is not checked here.
        """
        if self.enable_chunked_prefill or self.engine_format == "tensorrt_engine":
            return None
        return self.max_num_tokens or TRTLLM_DEFAULT_MAX_NUM_TOKENS


# TensorRT-LLM's default max_num_tokens (BaseLlmArgs / BuildConfig, and trtllm-serve's --max_num_tokens default).
TRTLLM_DEFAULT_MAX_NUM_TOKENS = 8192

# The sidecar's default command: trtllm-serve in its own environment (see docs/tensorrt-llm.md).
DEFAULT_SERVER_COMMAND = (
    "trtllm-serve",
    "serve",
    "{model}",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "--tp_size",
    "{tp}",
    "--extra_llm_api_options",
    "{llm_api_options}",
)
SERVER_COMMAND_FIELDS = frozenset({"model", "host", "port", "tp", "max_seq_len", "llm_api_options"})

# What trtllm-serve needs beyond its flags (written to the YAML of --extra_llm_api_options, which overrides them;
# commands/serve.py update_llm_args_with_extra_dict): chunked prefill, else every prompt above max_num_tokens is
# a 400; iteration stats, else the PyTorch backend's /metrics is always [] (py_executor: "if
# self.enable_iter_perf_stats == False: return []"). Both are TorchLlmArgs fields; --backend tensorrt has neither.
DEFAULT_LLM_API_OPTIONS = {"enable_chunked_prefill": True, "enable_iter_perf_stats": True}
# TorchLlmArgs fields we know of that the TensorRT backend's TrtLlmArgs lacks (its models forbid unknown fields):
# the two above and stream_interval (responses every N iterations, py_executor.py _handle_responses).
TORCH_ONLY_LLM_API_OPTIONS = frozenset({"enable_chunked_prefill", "enable_iter_perf_stats", "stream_interval"})


def _placeholders(command: list[str]) -> set[str]:
    return {name for arg in command for _, name, _, _ in string.Formatter().parse(arg) if name}


def _flag_value(command: list[str], *names: str) -> str | None:
    """The value of ``--name value`` / ``--name=value`` in ``command`` (the last one wins, as in click)."""
    value = None
    for i, arg in enumerate(command):
        for name in names:
            if arg == name and i + 1 < len(command):
                value = command[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def is_trtllm_serve(command: list[str]) -> bool:
    """Whether ``command`` starts trtllm-serve (its flags and limits are then known and checked)."""
    return bool(command) and command[0].replace("\\", "/").rsplit("/", 1)[-1] == "trtllm-serve"


class OpenAIServerEngineConfig(StrictModel):
    """An engine server process per replica (default: trtllm-serve), or a running server, over the OpenAI API."""

    backend: Literal["openai_server"] = "openai_server"

    def sampling_fields(self) -> frozenset[str]:
        """The optional sampling fields this backend implements (engines.protocol.SAMPLING_FIELDS)."""
        fields = OPENAI_SAMPLING_FIELDS | (OPENAI_EXTENSION_FIELDS if self.sampling_extensions else frozenset())
        return fields | (GUIDED_FIELDS if self.structured_output else frozenset())

    model: str = Field(
        description="The checkpoint the server loads: '{model}' in the command, and checked against the "
        "declared dtype / quantization / tensor parallel size when it is a local directory. "
        "'builtin:<name>' resolves to the generated directory."
    )
    served_model_name: str | None = Field(
        None, description="The 'model' field sent in requests; None sends the (resolved) model."
    )
    url: str | None = Field(
        None,
        description="Base URL of an already running OpenAI-compatible server (vLLM, SGLang, trtllm-serve). "
        "When set, no process is started and the command is ignored.",
    )
    command: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SERVER_COMMAND),
        min_length=1,
        description="The server's command line, one argument per item, with placeholders {model}, {host}, "
        "{port} (a free port picked at start), {tp}, {max_seq_len} and {llm_api_options} (the path of a YAML file "
        "holding llm_api_options, written at start). Started in its own process group; it inherits the replica's "
        "environment (CUDA_VISIBLE_DEVICES included).",
    )
    llm_api_options: dict[str, Any] = Field(
        default_factory=lambda: dict(DEFAULT_LLM_API_OPTIONS),
        description="LLM API arguments for trtllm-serve, written to a YAML file whose path replaces "
        "{llm_api_options} in the command (trtllm-serve --extra_llm_api_options / --config; they override its "
        "flags). The default turns on chunked prefill and the iteration stats the load signal needs.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the server.")
    tensor_parallel_size: int = Field(
        1, ge=1, description="GPUs the server shards the model over; the replica must reserve as many."
    )
    dtype: DeclaredDtype = Field("auto", description="The dtype the checkpoint must hold; 'auto' checks nothing.")
    quantization: Quantization | None = Field(None, description=_QUANTIZATION_DESCRIPTION)
    max_seq_len: int | None = Field(
        None,
        ge=16,
        description="Longest prompt + output; None asks the checkpoint (or the server's /v1/models "
        "max_model_len). Must not exceed the model's.",
    )
    prompt_format: Literal["token_ids", "text"] = Field(
        "token_ids",
        description="How the prompt is sent: 'token_ids' (a list of ids, accepted by trtllm-serve and vLLM) "
        "or 'text' (decoded with the tokenizer, for servers that take strings only, like transformers serve).",
    )
    tokenizer: str | None = Field(
        None, description="Tokenizer for prompt_format 'text'; None uses the model's directory."
    )
    sampling_extensions: bool = Field(
        False,
        description="Send top_k, ignore_eos, stop_token_ids, repetition_penalty and min_tokens (vLLM / "
        "trtllm-serve extensions of the OpenAI API). Servers that accept only standard fields (transformers "
        "serve answers 422) need False; then a request using them is refused.",
    )
    structured_output: bool = Field(
        False,
        description="Send response_format (json_schema / json_object, and the JSON schema of a tool call that "
        "tool_choice requires) to the server, which must enforce it: trtllm-serve does with "
        "guided_decoding_backend (xgrammar) in llm_api_options, which is then required. False: such requests are "
        "refused with a 400 naming the field.",
    )
    startup_timeout_s: float = Field(
        900.0, gt=0, description="How long the server may take to answer /health after it was started."
    )
    health_timeout_s: float = Field(5.0, gt=0, description="Timeout of one /health probe.")
    stream_idle_timeout_s: float = Field(
        300.0, gt=0, description="Longest silence between two chunks of a stream before it counts as dead."
    )
    metrics_path: str | None = Field(
        "/metrics",
        description="Load endpoint polled for stats: trtllm-serve's iteration stats JSON or Prometheus text "
        "(vLLM). None, or a server without it, falls back to counting this replica's open streams. One poll "
        "is in flight at a time: trtllm-serve answers /metrics only after 2 s without a new iteration, so "
        "under load it answers late or not at all, and then load comes from the open streams (see "
        "docs/tensorrt-llm.md).",
    )
    stats_interval_s: float = Field(1.0, gt=0, le=60, description="How often the metrics endpoint is polled.")
    metrics_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Longest wait for one answer of the metrics endpoint (trtllm-serve holds it while it is busy). "
        "A poll given up leaves the server's handler reading its stats, so keep this long.",
    )
    max_batch_size: int | None = Field(
        None,
        ge=1,
        description="The server's batch slots, for the load estimate while its metrics say nothing; None reads "
        "trtllm-serve's --max_batch_size from the command, else the metrics' maxNumActiveRequests.",
    )
    shutdown_grace_s: float = Field(
        10.0, ge=0, description="After SIGTERM, how long the server may take to exit before SIGKILL."
    )
    kv_cache_events: bool | None = Field(
        None,
        description="Read trtllm-serve's KV cache events (POST /kv_cache_events, a few times a second) and tell the "
        "router which prompt blocks this replica holds (precise prefix routing). None: on where this replica "
        "starts trtllm-serve with {llm_api_options}, whose kv_cache_config then gets event_buffer_max_size "
        f"{DEFAULT_KV_EVENT_BUFFER} unless it sets one (event_buffer_max_size 0 or enable_block_reuse false there "
        "turn it off); off otherwise. True: also for a server at url, which must have been started with an event "
        "buffer and block reuse. False: off; the router then approximates the replica's cache from what it sent. "
        "Blocks are llm_api_options.kv_cache_config.tokens_per_block tokens long (TensorRT-LLM's default 32).",
    )
    coalesce: CoalesceConfig = Field(default_factory=CoalesceConfig)

    @field_validator("command")
    @classmethod
    def _known_placeholders(cls, command: list[str]) -> list[str]:
        for arg in command:
            for _, name, _, _ in string.Formatter().parse(arg):
                if name is not None and name not in SERVER_COMMAND_FIELDS:
                    known = ", ".join("{" + f + "}" for f in sorted(SERVER_COMMAND_FIELDS))
                    raise ValueError(f"unknown placeholder {{{name}}} in {arg!r} (known: {known})")
        return command

    @model_validator(mode="after")
    def _command_can_start(self) -> OpenAIServerEngineConfig:
        # What the server would exit on at start, refused at deploy time instead (nothing starts with a url).
        if self.url is not None:
            return self
        used = _placeholders(self.command)
        problems = []
        if "max_seq_len" in used and self.max_seq_len is None:
            # It would render as "" and trtllm-serve's --max_seq_len (click type=int) exits at start.
            problems.append(("max_seq_len", "is not set, but the command passes {max_seq_len}: set it"))
        # Compared with the default, not model_fields_set: the replica re-validates a dump of this config, in which
        # every field counts as set.
        if self.llm_api_options != DEFAULT_LLM_API_OPTIONS and "llm_api_options" not in used:
            problems.append(
                ("llm_api_options", "is set, but the command does not pass {llm_api_options} (--extra_llm_api_options)")
            )
        if is_trtllm_serve(self.command) and self.trtllm_loader() == "tensorrt" and "llm_api_options" in used:
            torch_only = sorted(set(self.llm_api_options) & TORCH_ONLY_LLM_API_OPTIONS)
            if torch_only:
                problems.append(
                    (
                        "llm_api_options",
                        f"{', '.join(torch_only)}: PyTorch-backend arguments, refused by --backend tensorrt",
                    )
                )
        # trtllm-serve turns response_format into guided decoding parameters whether or not it has a guided decoder
        # (openai_protocol.py _response_format_to_guided_decoding_params); only guided_decoding_backend (llm_args.py,
        # default None) makes the engine enforce them.
        guided = "llm_api_options" in used and self.llm_api_options.get("guided_decoding_backend")
        if self.structured_output and is_trtllm_serve(self.command) and not guided:
            problems.append(
                (
                    "structured_output",
                    "needs trtllm-serve started with a guided decoding backend: add guided_decoding_backend: "
                    "xgrammar to llm_api_options (and pass {llm_api_options} in the command)",
                )
            )
        problems.extend(self._kv_cache_events_problems("llm_api_options" in used))
        if problems:
            raise ValueError("; ".join(f"{path}: {message}" for path, message in problems))
        return self

    def _server_kv_cache_config(self) -> dict[str, Any]:
        kv = self.llm_api_options.get("kv_cache_config")
        return kv if isinstance(kv, dict) else {}

    def _kv_cache_events_problems(self, passes_options: bool) -> list[tuple[str, str]]:
        """Where kv_cache_events is asked for (True) but the server we start could not send any."""
        if self.kv_cache_events is not True or not (passes_options and is_trtllm_serve(self.command)):
            return []
        kv = self._server_kv_cache_config()
        if kv.get("enable_block_reuse") is False:
            # TensorRT-LLM sends events only with block reuse (llm.py get_kv_cache_events docstring).
            return [
                (
                    "llm_api_options.kv_cache_config.enable_block_reuse",
                    "is false, but kv_cache_events needs block reuse: turn it on, or set kv_cache_events: false",
                )
            ]
        if kv.get("event_buffer_max_size") == 0:
            return [
                (
                    "llm_api_options.kv_cache_config.event_buffer_max_size",
                    "is 0, which turns TensorRT-LLM's KV cache events off: remove it, or set kv_cache_events: false",
                )
            ]
        return []

    def kv_events_enabled(self) -> bool:
        """Whether the replica reads the server's KV cache events (see the kv_cache_events field)."""
        if self.kv_cache_events is not None:
            return self.kv_cache_events
        if self.url is not None or not is_trtllm_serve(self.command):
            return False
        if "llm_api_options" not in _placeholders(self.command):
            return False  # the event buffer cannot be turned on
        kv = self._server_kv_cache_config()
        return kv.get("enable_block_reuse") is not False and kv.get("event_buffer_max_size") != 0

    def kv_block_tokens(self) -> int:
        """Tokens per KV cache block of the server (TensorRT-LLM's KvCacheConfig.tokens_per_block, default 32)."""
        value = self._server_kv_cache_config().get("tokens_per_block", 32)
        return value if isinstance(value, int) and value > 0 else 32

    def server_llm_api_options(self) -> dict[str, Any]:
        """llm_api_options as written for {llm_api_options}: with the event buffer on where events are read."""
        options = dict(self.llm_api_options)
        if self.url is None and self.kv_events_enabled():
            # kv_cache_config is a KvCacheConfig of both backends (llm_args.py BaseLlmArgs); event_buffer_max_size
            # defaults to 0 there, which keeps the events off.
            kv = dict(self._server_kv_cache_config())
            kv.setdefault("event_buffer_max_size", DEFAULT_KV_EVENT_BUFFER)
            options["kv_cache_config"] = kv
        return options

    def trtllm_serve_settings(self) -> dict[str, Any] | None:
        """trtllm-serve's settings that our checks need, from its flags and llm_api_options (which override them);
        None when the command is not trtllm-serve (or a url is used: that server's settings are not ours)."""
        if self.url is not None or not is_trtllm_serve(self.command):
            return None
        backend = _flag_value(self.command, "--backend") or "pytorch"
        max_num_tokens = _flag_value(self.command, "--max_num_tokens")
        max_batch_size = _flag_value(self.command, "--max_batch_size")
        settings: dict[str, Any] = {
            "backend": {"trt": "tensorrt"}.get(backend, backend),
            "enable_chunked_prefill": "--enable_chunked_prefill" in self.command,
            "max_num_tokens": int(max_num_tokens) if max_num_tokens and max_num_tokens.isdigit() else None,
            "max_batch_size": int(max_batch_size) if max_batch_size and max_batch_size.isdigit() else None,
        }
        if "llm_api_options" in _placeholders(self.command):
            settings.update({k: v for k, v in self.llm_api_options.items() if k in settings})
        return settings

    def trtllm_loader(self) -> Literal["pytorch", "tensorrt"] | None:
        """The TensorRT-LLM backend trtllm-serve loads the model with; None when it is not trtllm-serve."""
        settings = self.trtllm_serve_settings()
        if settings is None:
            return None
        return "tensorrt" if settings["backend"] == "tensorrt" else "pytorch"

    def prefill_token_limit(self) -> int | None:
        """The longest prompt the server accepts, or None where it has no limit of its own or we cannot tell
        (see :meth:`TRTLLMEngineConfig.prefill_token_limit`)."""
        settings = self.trtllm_serve_settings()
        if settings is None or settings["backend"] != "pytorch" or settings["enable_chunked_prefill"]:
            return None
        return settings["max_num_tokens"] or TRTLLM_DEFAULT_MAX_NUM_TOKENS

    def batch_slots(self) -> int | None:
        """The server's batch slots when the config says them (max_batch_size, or trtllm-serve's flag)."""
        settings = self.trtllm_serve_settings() or {}
        return self.max_batch_size or settings.get("max_batch_size")


class EmulatedEngineConfig(StrictModel):
    """An engine that keeps a real engine's time without doing its work (engines/emulated.py, docs/emulated.md).

    It steps the profile's continuous batch on the real clock and streams real token ids of ``tokenizer``
    (a walk through a shipped text, so the text is readable, Chinese included) through the same detokenizer,
    stop-string and coalescing path as the real backends, for almost no CPU.
    """

    backend: Literal["emulated"] = "emulated"

    def sampling_fields(self) -> frozenset[str]:
        """The optional sampling fields this backend implements (engines.protocol.SAMPLING_FIELDS)."""
        return EMULATED_SAMPLING_FIELDS

    preset: str | None = Field(
        None,
        description="A named profile of engines/presets.py (e.g. 'h200-llama-3.1-8b-int4'); None: 'profile' "
        "gives every figure.",
    )
    profile: dict[str, Any] = Field(
        default_factory=dict,
        description="EngineProfile figures (engines/profile.py): with a preset, the ones that differ from it "
        "(e.g. max_running_requests); without one, all of them.",
    )
    tokenizer: str = Field(
        "builtin:tiny",
        description="The tokenizer whose ids the engine streams and whose vocabulary bounds prompts (a path or "
        "'builtin:<name>'); the ingress must use the same one.",
    )
    startup_time_scale: float = Field(
        1.0,
        ge=0,
        description="Start-up takes the profile's startup_s times this (0: at once). 1 keeps the real engine's "
        "cold start, which is what autoscaling should see.",
    )
    max_queued_requests: int = Field(
        1024, ge=0, description="Requests waiting for a batch slot; beyond this the engine answers overloaded (429)."
    )
    seed: int = Field(
        0, description="Seeds where requests without a seed start in the text (greedy requests start by prompt)."
    )
    coalesce: CoalesceConfig = Field(default_factory=CoalesceConfig)

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, preset: str | None) -> str | None:
        if preset is not None and preset.removeprefix(EMULATED_PREFIX) not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
        return None if preset is None else preset.removeprefix(EMULATED_PREFIX)

    @model_validator(mode="after")
    def _profile_is_complete(self) -> EmulatedEngineConfig:
        # Resolved once here, so that a wrong or missing figure fails at deploy time with its name.
        if self.preset is None and not self.profile:
            raise ValueError(f"give a preset (one of {', '.join(sorted(PRESETS))}) or every figure in 'profile'")
        try:
            self.engine_profile()
        except ValidationError as e:
            problems = "; ".join(f"profile.{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
            raise ValueError(problems) from None
        return self

    def engine_profile(self) -> EngineProfile:
        """The preset with ``profile``'s figures over it (or ``profile`` alone)."""
        if self.preset is None:
            return EngineProfile.model_validate(self.profile)
        base = PRESETS[self.preset]
        return EngineProfile.model_validate({**base.model_dump(), **self.profile}) if self.profile else base

    @property
    def model(self) -> str:
        """What /variants shows as the variant's model."""
        return EMULATED_PREFIX + (self.preset or "inline")


# pydantic picks the member by ``backend`` (and names it in errors).
EngineConfig = Annotated[
    HFEngineConfig | TRTLLMEngineConfig | OpenAIServerEngineConfig | EmulatedEngineConfig,
    Field(discriminator="backend"),
]
