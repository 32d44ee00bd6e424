"""Contract tests of the ``trtllm`` backend against a fake ``tensorrt_llm`` (tests/engines/fakes/).

TensorRT-LLM cannot be installed on these machines, so these tests prove our *mapping* onto the 1.x API
surface (argument names, the mutated streaming RequestOutput, abort() on cancel, max_tokens always passed,
stop strings held back, consumed-on-read iteration stats, KV cache events renamed to the router's block hashes),
not TensorRT-LLM itself: in particular not its block hash function (the adapter never uses it), nor when the real
engine stores blocks or how its queues interleave events with tokens. The fake is put in ``sys.modules`` through
monkeypatch, as an installed package would be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import EngineConfigError, EngineDeadError, InvalidRequestError
from engines import trtllm
from engines.config import KvCacheSettings, TRTLLMEngineConfig
from engines.factory import make_engine
from engines.kv_blocks import block_hashes
from engines.protocol import (
    FINISH_LENGTH,
    FINISH_STOP,
    Delta,
    GenerationRequest,
    GuidedDecoding,
    SamplingParams,
)
from engines.trtllm import kv_cache_kwargs, token_logprobs

FAKES = Path(__file__).parent / "fakes"
SCRIPT = "Hello, world! This is a fake completion."
PROMPT = [ord(c) for c in "Say hi"]

pytestmark = pytest.mark.contract


@pytest.fixture
def fake_trtllm(monkeypatch):
    """Makes ``import tensorrt_llm`` find the fake, as if it were installed; undone after the test."""
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKES))
    import tensorrt_llm

    monkeypatch.setattr(tensorrt_llm.LLM, "instances", [])
    yield tensorrt_llm
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.fixture
def hf_checkpoint(tmp_path) -> Path:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "torch_dtype": "bfloat16",
                "num_attention_heads": 8,
                "max_position_embeddings": 100_000,
            }
        )
    )
    return tmp_path


def config(model: Path | str, **overrides) -> TRTLLMEngineConfig:
    overrides.setdefault("coalesce", {"interval_ms": 0})  # every engine step as its own delta
    return TRTLLMEngineConfig(model=str(model), **overrides)


async def started(cfg: TRTLLMEngineConfig):
    engine = make_engine(cfg)
    await engine.start()
    return engine


def request(max_tokens: int = 100, **sampling) -> GenerationRequest:
    return GenerationRequest("r1", list(PROMPT), SamplingParams(max_tokens=max_tokens, **sampling))


async def collect(engine, req: GenerationRequest) -> list[Delta]:
    return [d async for d in engine.generate(req)]


async def test_start_without_tensorrt_llm_says_what_is_missing(monkeypatch, hf_checkpoint):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # import tensorrt_llm -> ImportError
    engine = make_engine(config(hf_checkpoint))
    with pytest.raises(EngineConfigError) as err:
        await engine.start()
    message = str(err.value)
    assert "tensorrt_llm" in message
    assert "openai_server" in message
    assert "docs/tensorrt-llm.md" in message


async def test_llm_arguments_contract(fake_trtllm, hf_checkpoint):
    cfg = config(
        hf_checkpoint,
        tensor_parallel_size=2,
        dtype="bfloat16",
        max_batch_size=64,
        max_num_tokens=4096,
        max_seq_len=256,
        enable_chunked_prefill=True,
        kv_cache=KvCacheSettings(free_gpu_memory_fraction=0.8, enable_block_reuse=False, event_buffer_max_size=0),
    )
    engine = await started(cfg)
    (llm,) = fake_trtllm.LLM.instances
    kwargs = llm.kwargs
    assert kwargs["model"] == str(hf_checkpoint)
    assert kwargs["tensor_parallel_size"] == 2
    assert kwargs["dtype"] == "bfloat16"
    assert (kwargs["max_batch_size"], kwargs["max_num_tokens"], kwargs["max_seq_len"]) == (64, 4096, 256)
    assert kwargs["enable_chunked_prefill"] is True
    assert kwargs["enable_iter_perf_stats"] is True  # else the PyTorch backend reports no load
    kv = kwargs["kv_cache_config"]
    assert isinstance(kv, sys.modules["tensorrt_llm.llmapi"].KvCacheConfig)
    assert (kv.free_gpu_memory_fraction, kv.enable_block_reuse, kv.event_buffer_max_size) == (0.8, False, 0)
    assert kv.tokens_per_block == 32
    assert engine.kv_block_tokens is None and engine.kv_events() is None  # events off: nothing said of the cache
    assert engine.context_length == 256
    await engine.shutdown()


async def test_unknown_extra_llm_arg_is_refused_at_start_contract(fake_trtllm, hf_checkpoint):
    engine = make_engine(config(hf_checkpoint, extra_llm_args={"no_such_arg": 1}))
    with pytest.raises(EngineConfigError, match="no_such_arg"):
        await engine.start()


async def test_stream_maps_the_mutated_request_output_to_deltas_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request())
    assert "".join(d.text for d in deltas) == SCRIPT
    assert [t for d in deltas for t in d.token_ids] == [ord(c) for c in SCRIPT]
    assert all(len(d.text) <= 1 for d in deltas)  # only what is new, never the text so far
    assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)
    assert deltas[-1].finish_reason == FINISH_STOP  # the end id
    assert deltas[-1].completion_tokens == len(SCRIPT)
    assert deltas[-1].prompt_tokens == len(PROMPT)
    assert deltas[0].first_token_time is not None
    await engine.shutdown()


async def test_max_tokens_is_always_passed_contract(fake_trtllm, hf_checkpoint):
    # TensorRT-LLM's SamplingParams.max_tokens defaults to 32: a request for 40 must get 40.
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(max_tokens=40, ignore_eos=True))
    assert sum(len(d.token_ids) for d in deltas) == 40
    assert deltas[-1].finish_reason == FINISH_LENGTH
    (llm,) = fake_trtllm.LLM.instances
    _, params = llm.requests[-1]
    assert params.max_tokens == 40 and params.ignore_eos is True
    await engine.shutdown()


async def test_max_tokens_is_capped_by_the_context_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint, max_seq_len=32))
    deltas = await collect(engine, request(max_tokens=1000, ignore_eos=True))
    assert sum(len(d.token_ids) for d in deltas) == 32 - len(PROMPT)
    assert deltas[-1].finish_reason == FINISH_LENGTH
    await engine.shutdown()


async def test_sampling_mapping_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    await collect(engine, request(temperature=0.0, max_tokens=3))
    await collect(engine, request(temperature=0.7, top_p=0.9, top_k=0, seed=5, max_tokens=3))
    (llm,) = fake_trtllm.LLM.instances
    greedy, sampled = (params for _, params in llm.requests)
    assert greedy._greedy_decoding and greedy.top_k == 1
    # top_k / top_p left None would mean greedy in TensorRT-LLM: sampling must set them.
    assert not sampled._greedy_decoding
    assert (sampled.temperature, sampled.top_p, sampled.top_k, sampled.seed) == (0.7, 0.9, 0, 5)
    await engine.shutdown()


async def test_penalties_and_min_tokens_reach_the_sampling_params_contract(fake_trtllm, hf_checkpoint):
    # What the fake cannot prove: that the C++ sampler applies them (TensorRT-LLM's own tests do).
    engine = await started(config(hf_checkpoint))
    await collect(engine, request(max_tokens=3))
    asked = {"presence_penalty": 0.5, "frequency_penalty": -0.25, "repetition_penalty": 1.3, "min_tokens": 2}
    await collect(engine, request(max_tokens=3, **asked))
    (llm,) = fake_trtllm.LLM.instances
    plain, penalised = (params for _, params in llm.requests)
    # Neutral values are left None: the C++ runtime's own defaults.
    assert (plain.presence_penalty, plain.frequency_penalty, plain.repetition_penalty, plain.min_tokens) == (
        None,
        None,
        None,
        None,
    )
    assert {name: getattr(penalised, name) for name in asked} == asked
    await engine.shutdown()


@pytest.mark.parametrize("alternatives", [0, 2])
async def test_logprobs_are_asked_for_and_read_per_token_contract(fake_trtllm, hf_checkpoint, alternatives):
    # What the fake cannot prove: the values (the real sampler's); it does the shapes of executor/result.py.
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(max_tokens=5, ignore_eos=True, logprobs=alternatives))
    (llm,) = fake_trtllm.LLM.instances
    _, params = llm.requests[-1]
    assert params.logprobs == max(1, alternatives)  # 0 would be read as off: ask for 1, keep the token's own
    entries = [e for d in deltas for e in d.logprobs or ()]
    assert [e.token for e in entries] == [chr(t) for d in deltas for t in d.token_ids]
    assert all(e.logprob == -0.5 for e in entries)  # the chosen token's, not an alternative's
    assert all(len(e.top) == alternatives and (not e.top or e.top[0] == (e.token, -0.5)) for e in entries)
    await engine.shutdown()


async def test_without_logprobs_asked_none_are_requested_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(max_tokens=3))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.requests[-1][1].logprobs is None and all(d.logprobs is None for d in deltas)
    await engine.shutdown()


def test_older_float_logprobs_are_read_too():
    entries = token_logprobs([65, 66], [-0.25, float("-inf")], 3, chr)
    assert [(e.token, e.logprob, e.top) for e in entries] == [("A", -0.25, ()), ("B", -9999.0, ())]


async def test_logit_bias_becomes_an_embedding_bias_of_the_vocabulary_size_contract(fake_trtllm, tmp_path):
    checkpoint = tmp_path / "model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 300}))
    engine = await started(config(checkpoint, max_seq_len=256))
    await collect(engine, request(max_tokens=3, logit_bias={5: -100.0, 72: 2.5}))
    (llm,) = fake_trtllm.LLM.instances
    bias = llm.requests[0][1].embedding_bias
    assert tuple(bias.shape) == (300,) and str(bias.dtype) == "torch.float32"  # as trtllm-serve builds it
    assert (float(bias[5]), float(bias[72]), float(bias.abs().sum())) == (-100.0, 2.5, 102.5)
    with pytest.raises(InvalidRequestError) as err:  # a token id past the logits: the client's 400
        await collect(engine, request(logit_bias={300: 1.0}))
    assert err.value.param == "logit_bias"
    await engine.shutdown()


async def test_all_zero_logit_bias_asks_for_nothing_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    await collect(engine, request(max_tokens=3, logit_bias={5: 0.0}))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.requests[0][1].embedding_bias is None
    await engine.shutdown()


async def test_best_of_answers_with_the_likeliest_sequence_read_whole_contract(fake_trtllm, hf_checkpoint):
    # The fake's sequence 0 leads for the first tokens, then the last one overtakes it: a stream that followed
    # outputs[0] step by step would splice two sequences' texts.
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(max_tokens=100, temperature=0.8, best_of=3))
    (llm,) = fake_trtllm.LLM.instances
    params = llm.requests[0][1]
    assert (params.n, params.best_of) == (1, 3)
    assert params.logprobs == 1  # cumulative log probabilities come with them
    assert len(deltas) == 1 and deltas[0].finish_reason == FINISH_STOP
    assert deltas[0].text == SCRIPT.swapcase()
    assert deltas[0].logprobs is None  # asked for ranking, not by the client
    await engine.shutdown()


async def test_best_of_when_greedy_asks_for_nothing_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(max_tokens=100, temperature=0.0, best_of=3))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.requests[0][1].best_of == 1  # the same sequence three times: one
    assert "".join(d.text for d in deltas) == SCRIPT
    await engine.shutdown()


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}


async def test_guided_decoding_backend_is_passed_to_the_llm_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint, guided_decoding_backend="xgrammar"))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.kwargs["guided_decoding_backend"] == "xgrammar"
    assert {"response_format", "tool_choice"} <= engine._config.sampling_fields()
    await engine.shutdown()


@pytest.mark.parametrize(
    ("guided", "expected"),
    [
        (GuidedDecoding("json", WEATHER), {"json": WEATHER}),
        (GuidedDecoding("json_object"), {"json_object": True}),
        (GuidedDecoding("regex", "[0-9]+"), {"regex": "[0-9]+"}),
    ],
)
async def test_a_guide_becomes_guided_decoding_params_contract(fake_trtllm, hf_checkpoint, guided, expected):
    fake_trtllm.LLM.guided_script = '{"city": "Paris", "unit": "c"}' if guided.kind != "regex" else "2026"
    engine = await started(config(hf_checkpoint, guided_decoding_backend="xgrammar"))
    deltas = await collect(engine, request(guided=guided))
    (llm,) = fake_trtllm.LLM.instances
    params = llm.requests[0][1].guided_decoding
    assert isinstance(params, sys.modules["tensorrt_llm.llmapi"].GuidedDecodingParams)
    assert {k: v for k, v in dataclasses.asdict(params).items() if v} == expected
    assert "".join(d.text for d in deltas) == fake_trtllm.LLM.guided_script  # the fake enforces the guide
    await engine.shutdown()


async def test_the_guided_output_follows_the_schema_contract(fake_trtllm, hf_checkpoint):
    # The scripted text does not match the schema: under the guide the "model" writes what the schema allows.
    engine = await started(config(hf_checkpoint, guided_decoding_backend="xgrammar"))
    deltas = await collect(engine, request(guided=GuidedDecoding("json", WEATHER)))
    assert json.loads("".join(d.text for d in deltas)) == {"city": "", "unit": "c"}
    await engine.shutdown()


async def test_structured_output_without_a_guided_decoding_backend_is_refused_naming_it_contract(
    fake_trtllm, hf_checkpoint
):
    # Without a guided decoder TensorRT-LLM writes unconstrained text (the fake too): refused, never ignored.
    engine = await started(config(hf_checkpoint))
    for guided in (GuidedDecoding("json_object"), GuidedDecoding("json", WEATHER, param="tool_choice")):
        with pytest.raises(InvalidRequestError) as err:
            await collect(engine, request(guided=guided))
        assert err.value.param == guided.param
    (llm,) = fake_trtllm.LLM.instances
    assert llm.requests == []
    await engine.shutdown()


async def test_a_guided_decoding_backend_the_llm_dropped_fails_at_start_contract(
    fake_trtllm, hf_checkpoint, monkeypatch
):
    # Newer builds drop the backend for architectures without guided decoding (_apply_model_feature_fallbacks).
    monkeypatch.setattr(fake_trtllm.LLM, "unsupported_guided_architecture", True)
    engine = make_engine(config(hf_checkpoint, guided_decoding_backend="xgrammar"))
    with pytest.raises(EngineConfigError, match="guided_decoding_backend"):
        await engine.start()


def test_guided_decoding_config_mismatches_are_refused_at_deploy_time(hf_checkpoint):
    with pytest.raises(ValidationError, match="guided_decoding_backend"):
        config(hf_checkpoint, extra_llm_args={"guided_decoding_backend": "xgrammar"})
    with pytest.raises(ValidationError, match="guided_decoding_backend"):
        config(hf_checkpoint, guided_decoding_backend="llguidance", engine_format="tensorrt_engine")
    with pytest.raises(ValidationError, match="guided_decoding_backend"):
        config(hf_checkpoint, guided_decoding_backend="outlines")
    assert "response_format" not in config(hf_checkpoint).sampling_fields()


async def test_stop_string_never_leaks_contract(fake_trtllm, hf_checkpoint):
    # TensorRT-LLM streams "w", "wo" (the stop string's start) before it cuts the text at "world".
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(stop=["world"]))
    assert "".join(d.text for d in deltas) == "Hello, "
    assert not any("w" in d.text for d in deltas)
    assert deltas[-1].finish_reason == FINISH_STOP
    await engine.shutdown()


async def test_held_back_stop_prefix_is_released_when_it_is_not_a_stop_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(stop=["world?"]))  # "world" then "!" decides: not a stop
    assert "".join(d.text for d in deltas) == SCRIPT
    await engine.shutdown()


async def test_stop_token_ids_are_passed_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(stop_token_ids=[ord("!")]))
    assert deltas[-1].finish_reason == FINISH_STOP
    assert "".join(d.text for d in deltas).startswith("Hello, world")
    assert "This" not in "".join(d.text for d in deltas)
    await engine.shutdown()


async def test_closing_the_stream_aborts_the_request_contract(fake_trtllm, hf_checkpoint):
    # Leaving the async for does not abort in TensorRT-LLM; without abort() the fake generates 10000 tokens.
    engine = await started(config(hf_checkpoint))
    (llm,) = fake_trtllm.LLM.instances
    stream = engine.generate(request(max_tokens=10_000, ignore_eos=True))
    first = await anext(stream)
    assert first.text == "H"
    await stream.aclose()
    assert llm.aborted == [0]
    await wait_for(lambda: llm.live_requests == 0)
    assert engine.stats().running_requests == 0
    await engine.shutdown()


async def test_cancelling_the_consumer_aborts_the_request_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint, coalesce={"interval_ms": 5}))
    (llm,) = fake_trtllm.LLM.instances
    got_first = asyncio.Event()

    async def consume():
        async for _ in engine.generate(request(max_tokens=10_000, ignore_eos=True)):
            got_first.set()

    task = asyncio.create_task(consume())
    await got_first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert llm.aborted == [0]
    await wait_for(lambda: llm.live_requests == 0)
    await engine.shutdown()


async def test_stats_come_from_iteration_stats_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint, stats_interval_s=0.01, max_batch_size=8))
    stream = engine.generate(request(max_tokens=10_000, ignore_eos=True))
    await anext(stream)
    await wait_for(lambda: engine.stats().kv_blocks_total == 1000)
    stats = engine.stats()
    assert stats.running_requests == 1 and stats.queued_requests == 0
    assert stats.kv_blocks_used >= 1
    assert stats.context_tokens == stats.kv_blocks_used * 32  # whole blocks of kvCacheStats.tokensPerBlock
    assert stats.max_running_requests == 8
    assert stats.context_length == 100_000
    await stream.aclose()
    assert engine.stats().running_requests == 0  # stale iteration stats are capped by open requests
    await engine.shutdown()


async def test_limits_known_at_start_are_reported_before_any_request_contract(fake_trtllm, hf_checkpoint):
    """Before the first iteration there are no iteration stats: the batch slots come from the LLM's resolved
    arguments; the KV cache's size is not known yet (0) and must not be made up."""
    engine = await started(config(hf_checkpoint))
    stats = engine.stats()
    assert stats.max_running_requests == 2048  # TorchLlmArgs' default, as LLM.args reports it
    assert stats.context_length == 100_000
    assert stats.kv_blocks_total == 0
    assert stats.healthy
    await engine.shutdown()


async def test_shutdown_ends_open_streams_with_engine_dead_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    stream = engine.generate(request(max_tokens=10_000, ignore_eos=True))
    await anext(stream)
    await engine.shutdown()
    with pytest.raises(EngineDeadError):
        async for _ in stream:
            pass
    with pytest.raises(EngineDeadError):
        await engine.check_health()


async def test_prebuilt_engine_dir_uses_the_legacy_backend_contract(fake_trtllm, tmp_path):
    _prebuilt_engine_dir(tmp_path, {"max_seq_len": 2048, "max_batch_size": 16})
    engine = await started(config(tmp_path, dtype="float16"))
    (llm,) = fake_trtllm.LLM.instances
    assert type(llm).__name__ == "TrtLLM"
    assert "enable_iter_perf_stats" not in llm.kwargs  # a PyTorch-backend argument
    assert engine.context_length == 2048
    await engine.shutdown()


async def test_prebuilt_engine_dir_without_the_legacy_backend_is_refused_contract(fake_trtllm, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorrt_llm._tensorrt_engine", None)  # a build without it
    (tmp_path / "config.json").write_text(
        json.dumps({"pretrained_config": {"mapping": {"tp_size": 1}}, "build_config": {"max_seq_len": 64}})
    )
    with pytest.raises(EngineConfigError, match="no engine backend"):
        await started(config(tmp_path))


async def test_start_validates_the_checkpoint_before_loading_contract(fake_trtllm, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 512}))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    with pytest.raises(EngineConfigError) as err:
        await started(config(tmp_path, dtype="float16"))
    assert "float16" in str(err.value) and "'fp8'" in str(err.value)
    assert fake_trtllm.LLM.instances == []  # refused before anything loaded


async def wait_for(condition, timeout_s: float = 10.0) -> None:
    """Polls ``condition`` until it holds (the fake's executor runs on its own schedule)."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


# --- The audit's discrepancies (docs/tensorrt-llm.md, its D1-D13 table), one test each ---


@pytest.mark.parametrize("path", ["cpp", "python"])
async def test_stop_string_matched_by_the_executor_never_leaks_contract(fake_trtllm, hf_checkpoint, monkeypatch, path):
    """D5: the C++ stop-words path truncates only the token ids, so 'worl' stays in outputs[0].text; the held-back
    start of the stop string must not be flushed on the final step (the older path cuts the text itself)."""
    monkeypatch.setattr(fake_trtllm.LLM, "stop_words_path", path)
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(stop=["world"]))
    assert "".join(d.text for d in deltas) == "Hello, "
    assert deltas[-1].finish_reason == FINISH_STOP
    await engine.shutdown()


async def test_a_stop_token_is_trimmed_and_never_decoded_contract(fake_trtllm, hf_checkpoint):
    """The executor truncates a stop token id from token_ids (include_stop_str_in_output False), so its text
    never appears."""
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, request(stop_token_ids=[ord("!")]))
    assert "".join(d.text for d in deltas) == "Hello, world"
    assert deltas[-1].finish_reason == FINISH_STOP
    await engine.shutdown()


@pytest.mark.parametrize("where", ["submit", "executor"])
async def test_a_prompt_over_max_num_tokens_without_chunked_prefill_is_the_clients_error_contract(
    fake_trtllm, hf_checkpoint, monkeypatch, where
):
    """D1 / D6: without chunked prefill the PyTorch backend refuses a prompt above max_num_tokens, as a ValueError
    from generate_async (1.x) or a RequestError from the result (newer): both are a 400, not a dead engine."""
    monkeypatch.setattr(fake_trtllm.LLM, "max_num_tokens_check", where)
    engine = await started(config(hf_checkpoint, enable_chunked_prefill=False, max_num_tokens=4))
    with pytest.raises(InvalidRequestError, match="should not exceed max_num_tokens"):
        await collect(engine, request())
    await engine.check_health()  # the engine is fine
    await engine.shutdown()


async def test_chunked_prefill_is_on_by_default_so_long_prompts_run_contract(fake_trtllm, hf_checkpoint):
    """D1: TensorRT-LLM's own default (off) refuses prompts over max_num_tokens; ours turns it on."""
    engine = await started(config(hf_checkpoint, max_num_tokens=4))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.kwargs["enable_chunked_prefill"] is True
    deltas = await collect(engine, request(max_tokens=3))  # a 6-token prompt
    assert deltas[-1].finish_reason == FINISH_LENGTH
    await engine.shutdown()


async def test_stats_polling_waits_for_the_first_request_contract(fake_trtllm, hf_checkpoint, monkeypatch):
    """D9: before the first request get_stats_async prints a warning on every call and yields nothing."""
    monkeypatch.setattr(fake_trtllm.LLM, "stats_warnings", 0)
    engine = await started(config(hf_checkpoint, stats_interval_s=0.01))
    for _ in range(20):
        await asyncio.sleep(0.005)  # room for a poll loop to run, if one had started
    assert fake_trtllm.LLM.stats_warnings == 0
    stream = engine.generate(request(max_tokens=10_000, ignore_eos=True))
    await anext(stream)
    await wait_for(lambda: engine.stats().kv_blocks_total == 1000)
    assert fake_trtllm.LLM.stats_warnings == 0
    await stream.aclose()
    await engine.shutdown()


async def test_a_prompt_counts_as_queued_prompt_tokens_until_its_first_output_contract(
    fake_trtllm, hf_checkpoint, monkeypatch
):
    """The LLM API reports no unprefilled prompt tokens; the adapter counts a request's prompt from its submission
    to its first output (engines/unprefilled.py), for the request routers' replica choice."""
    gate = asyncio.Event()  # clear: the executor takes no step, so no first token comes
    monkeypatch.setattr(fake_trtllm.LLM, "executor_gate", gate)
    engine = await started(config(hf_checkpoint))
    stream = engine.generate(request(max_tokens=100_000, ignore_eos=True))
    first = asyncio.create_task(anext(stream))
    await wait_for(lambda: engine.stats().queued_prompt_tokens == len(PROMPT))
    gate.set()
    await first
    assert engine.stats().queued_prompt_tokens == 0
    await stream.aclose()
    assert engine.stats().queued_prompt_tokens == 0
    await engine.shutdown()


async def test_stats_keep_coming_after_an_iteration_longer_than_the_poll_interval_contract(
    fake_trtllm, hf_checkpoint, monkeypatch
):
    """D9: TensorRT-LLM's stats iterator stays finished after one read timed out, until the next submission. A
    read timeout shorter than a slow iteration would freeze the stats for the rest of the running requests."""
    gate = asyncio.Event()
    gate.set()
    monkeypatch.setattr(fake_trtllm.LLM, "executor_gate", gate)
    engine = await started(config(hf_checkpoint, stats_interval_s=0.01))
    stream = engine.generate(request(max_tokens=100_000, ignore_eos=True))
    await anext(stream)
    await wait_for(lambda: engine.stats().kv_blocks_used >= 1)
    gate.clear()  # one slow iteration: ten poll intervals without a new entry
    await asyncio.sleep(0.1)
    before = engine.stats().kv_blocks_used
    gate.set()
    await wait_for(lambda: engine.stats().kv_blocks_used > before)  # the same request, no new submission
    await stream.aclose()
    await engine.shutdown()


def trtllm_checkpoint(directory: Path) -> Path:
    """A TensorRT-LLM checkpoint (convert_checkpoint.py output): config.json with architecture, dtype, mapping."""
    (directory / "config.json").write_text(
        json.dumps(
            {
                "architecture": "LlamaForCausalLM",
                "dtype": "float16",
                "num_attention_heads": 8,
                "max_position_embeddings": 4096,
                "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
                "quantization": {"quant_algo": None},
            }
        )
    )
    return directory


async def test_a_trtllm_checkpoint_goes_to_the_legacy_backend_contract(fake_trtllm, tmp_path):
    """D10: the PyTorch LLM loads Hugging Face checkpoints only; a TensorRT-LLM checkpoint is a TRT-backend input."""
    engine = await started(config(trtllm_checkpoint(tmp_path)))
    (llm,) = fake_trtllm.LLM.instances
    assert type(llm).__name__ == "TrtLLM"
    await engine.shutdown()


async def test_a_trtllm_checkpoint_on_the_pytorch_backend_is_refused_before_loading_contract(fake_trtllm, tmp_path):
    with pytest.raises(EngineConfigError, match="PyTorch backend"):
        await started(config(trtllm_checkpoint(tmp_path), engine_format="pytorch"))
    assert fake_trtllm.LLM.instances == []


async def test_an_hf_awq_checkpoint_is_refused_before_the_pytorch_loader_fails_contract(fake_trtllm, tmp_path):
    """D11: TensorRT-LLM's PyTorch loader has no branch for AutoAWQ / AutoGPTQ exports (load_hf_quant_config)."""
    quantization_config = {"quant_method": "awq", "bits": 4, "group_size": 128}
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "max_position_embeddings": 4096, "quantization_config": quantization_config})
    )
    with pytest.raises(EngineConfigError, match="no loader for Hugging Face AWQ"):
        await started(config(tmp_path, quantization="int4_awq"))
    assert fake_trtllm.LLM.instances == []


# --- the KV cache as the router sees it ----------------------------------------------------------------------------
# The fake keeps a prefix cache and emits KV cache events as TensorRT-LLM's KV cache manager does (fakes/
# fake_kv_cache.py). What it cannot prove: TensorRT-LLM's own block hash (the adapter never uses it), when exactly
# the real engine stores blocks (the fake stores a prompt's when its first token comes; TensorRT-LLM also stores the
# generated tokens' at the end), and how the real executor's queues interleave the events with the tokens.

LONG_PROMPT = list(range(1000, 1070))  # 70 tokens: two whole 32-token blocks and a partial one


def long_request(prompt: list[int] = LONG_PROMPT, request_id: str = "r1") -> GenerationRequest:
    return GenerationRequest(request_id, list(prompt), SamplingParams(max_tokens=3))


async def held_blocks(engine, until, held: set[int] | None = None) -> set[int]:
    """The replica's blocks as a router keeps them (engines/kv_blocks.py KvEvents.apply_to), once ``until`` holds."""
    held = set() if held is None else held

    def drained() -> bool:
        batch = engine.kv_events()
        batch.apply_to(held)
        return until(held)

    await wait_for(drained)
    return held


async def test_kv_cache_events_are_asked_for_by_default_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    (llm,) = fake_trtllm.LLM.instances
    kv = llm.kwargs["kv_cache_config"]
    assert (kv.event_buffer_max_size, kv.enable_block_reuse, kv.tokens_per_block) == (2048, True, 32)
    assert engine.kv_block_tokens == 32
    await engine.shutdown()


async def test_stored_blocks_reach_the_router_as_its_own_block_hashes_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    first = engine.kv_events()
    assert first is not None and first.cleared  # a new engine: whatever a reader held is void
    await collect(engine, long_request())
    wanted = set(block_hashes(LONG_PROMPT, 32))  # what the router computes from the prompt
    held = await held_blocks(engine, lambda held: wanted <= held)
    assert held == wanted  # the partial third block is no prompt block
    assert engine.stats().cached_blocks == 2
    await engine.shutdown()


async def test_evicted_blocks_come_back_out_of_the_router_contract(fake_trtllm, hf_checkpoint, monkeypatch):
    monkeypatch.setattr(fake_trtllm.LLM, "kv_cache_blocks", 2)  # room for one prompt's two blocks
    engine = await started(config(hf_checkpoint))
    first, second = LONG_PROMPT[:64], list(range(5000, 5064))
    await collect(engine, long_request(first))
    held = await held_blocks(engine, lambda held: set(block_hashes(first, 32)) <= held)
    await collect(engine, long_request(second, "r2"))
    held = await held_blocks(engine, lambda held: set(block_hashes(second, 32)) <= held, held)
    assert held == set(block_hashes(second, 32))  # the first prompt's blocks were evicted, and said so
    await engine.shutdown()


async def test_events_keep_coming_after_the_event_iterator_ran_dry_contract(fake_trtllm, hf_checkpoint, monkeypatch):
    """TensorRT-LLM's event iterator ends once a read timed out and stays ended until the next request: the reader
    starts over, and the next request's blocks still arrive."""
    monkeypatch.setattr(trtllm, "KV_EVENTS_TIMEOUT_S", 0.02)
    monkeypatch.setattr(trtllm, "KV_EVENTS_POLL_S", 0.01)
    engine = await started(config(hf_checkpoint))
    await collect(engine, long_request(LONG_PROMPT[:32]))
    held = await held_blocks(engine, lambda held: len(held) == 1)
    await asyncio.sleep(0.2)  # several timed-out reads
    await collect(engine, long_request(list(range(7000, 7032)), "r2"))
    held = await held_blocks(engine, lambda held: len(held) == 2, held)
    await engine.shutdown()


async def test_events_are_read_only_once_a_request_made_the_event_iterator_contract(
    fake_trtllm, hf_checkpoint, monkeypatch
):
    """Before the first request TensorRT-LLM has no event iterator (``aget_kv_events`` asserts)."""
    monkeypatch.setattr(trtllm, "KV_EVENTS_POLL_S", 0.01)
    calls = []
    real = fake_trtllm.LLM.get_kv_cache_events_async

    def counted(self, timeout=2):
        calls.append(timeout)
        return real(self, timeout)

    monkeypatch.setattr(fake_trtllm.LLM, "get_kv_cache_events_async", counted)
    engine = await started(config(hf_checkpoint))
    for _ in range(10):
        await asyncio.sleep(0.01)
    assert calls == []
    await collect(engine, long_request())
    await wait_for(lambda: calls)
    assert calls[0] == trtllm.KV_EVENTS_TIMEOUT_S
    await engine.shutdown()


async def test_cached_tokens_are_what_the_engine_reused_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint))
    cold = await collect(engine, long_request())
    warm = await collect(engine, long_request(request_id="r2"))
    assert {d.cached_tokens for d in cold} == {0}
    assert {d.cached_tokens for d in warm} == {64}  # two whole blocks; the partial one is prefilled again
    stats = engine.stats()
    assert (stats.cache_hit_tokens, stats.cache_prompt_tokens) == (64, 2 * len(LONG_PROMPT))
    await engine.shutdown()


async def test_builds_without_cached_tokens_leave_them_unknown_contract(fake_trtllm, hf_checkpoint, monkeypatch):
    monkeypatch.setattr(fake_trtllm.LLM, "reports_cached_tokens", False)
    engine = await started(config(hf_checkpoint))
    deltas = await collect(engine, long_request())
    assert {d.cached_tokens for d in deltas} == {None}
    assert engine.stats().cache_prompt_tokens == 0  # a hit rate only over requests whose reuse is known
    await engine.shutdown()


async def test_kv_cache_events_off_say_nothing_of_the_cache_contract(fake_trtllm, hf_checkpoint):
    engine = await started(config(hf_checkpoint, kv_cache={"event_buffer_max_size": 0}))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.kwargs["kv_cache_config"].event_buffer_max_size == 0
    await collect(engine, long_request())
    assert engine.kv_block_tokens is None and engine.kv_events() is None
    assert engine.stats().cached_blocks == 0
    await engine.shutdown()


def test_events_without_block_reuse_are_refused_at_deploy_time(hf_checkpoint):
    """TensorRT-LLM sends KV cache events only with block reuse (llm.py get_kv_cache_events)."""
    with pytest.raises(ValidationError, match="event_buffer_max_size: is 2048, but KV cache events need"):
        config(hf_checkpoint, kv_cache={"enable_block_reuse": False})
    off = config(hf_checkpoint, kv_cache={"enable_block_reuse": False, "event_buffer_max_size": 0})
    assert not off.kv_cache.kv_events


async def test_a_prebuilt_engines_block_size_is_its_builds_contract(fake_trtllm, tmp_path):
    _prebuilt_engine_dir(tmp_path, {"max_seq_len": 2048, "plugin_config": {"tokens_per_block": 64}})
    engine = await started(config(tmp_path, dtype="float16"))
    (llm,) = fake_trtllm.LLM.instances
    assert llm.kwargs["kv_cache_config"].event_buffer_max_size == 2048
    assert engine.kv_block_tokens == 64  # the engine's build, not the config's 32
    await engine.shutdown()


def test_a_kv_cache_config_without_tokens_per_block_gets_none():
    """Earlier 1.x KvCacheConfig (a StrictBaseModel) has no tokens_per_block and refuses the key; its blocks are 32."""

    @dataclasses.dataclass(kw_only=True)
    class OlderKvCacheConfig:
        free_gpu_memory_fraction: float | None = 0.9
        enable_block_reuse: bool = True
        max_tokens: int | None = None
        event_buffer_max_size: int = 0

    kwargs = kv_cache_kwargs(KvCacheSettings(), "pytorch", OlderKvCacheConfig)
    assert "tokens_per_block" not in kwargs
    OlderKvCacheConfig(**kwargs)
    with pytest.raises(EngineConfigError, match="tokens_per_block"):
        kv_cache_kwargs(KvCacheSettings(tokens_per_block=64), "pytorch", OlderKvCacheConfig)


def _prebuilt_engine_dir(path, build_config: dict) -> None:
    """A trtllm-build output directory's config.json: a one-GPU fp16 engine with ``build_config``."""
    pretrained = {
        "dtype": "float16",
        "num_attention_heads": 8,
        "mapping": {"world_size": 1, "tp_size": 1},
        "quantization": {"quant_algo": None},
    }
    (path / "config.json").write_text(json.dumps({"pretrained_config": pretrained, "build_config": build_config}))
