"""Contract tests of the ``openai_server`` backend against a fake ``trtllm-serve`` (fakes/trtllm_serve.py).

trtllm-serve cannot run here. The fake takes its command line (flags, ``--extra_llm_api_options`` YAML) and
mirrors the behaviours of TensorRT-LLM 1.x's server the audit found our adapter getting wrong (docs/tensorrt-llm.md):
the max_num_tokens refusal without chunked prefill, ``/metrics`` empty without iteration stats and held while
busy, stop words that leave a stop string's start in the streamed text, usage only with ``stream_options``,
finish reasons such as 'timeout', ``POST /kv_cache_events`` and usage's cached tokens. They prove our mapping
onto that behaviour, not TensorRT-LLM itself (nor its block hashes or when it stores blocks); the real
sidecar process path (start, stream, abort, crash) is tested against transformers serve in test_openai_server.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core.errors import EngineConfigError, InvalidRequestError
from engines.config import DEFAULT_LLM_API_OPTIONS, OpenAIServerEngineConfig
from engines.factory import make_engine
from engines.kv_blocks import block_hashes
from engines.openai_server import server_argv
from engines.protocol import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    GenerationRequest,
    GuidedDecoding,
    SamplingParams,
)
from engines.trtllm import response_format

FAKE_SERVE = Path(__file__).parent / "fakes" / "trtllm_serve.py"
PROMPT = list(range(100, 120))  # 20 token ids

pytestmark = pytest.mark.contract


@pytest.fixture(scope="module")
def trtllm_serve(tmp_path_factory) -> Path:
    """An executable named trtllm-serve that runs the fake (so the command is recognised as trtllm-serve)."""
    path = tmp_path_factory.mktemp("bin") / "trtllm-serve"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVE}" "$@"\n')
    path.chmod(0o755)
    return path


def command(trtllm_serve: Path, *flags: str) -> list[str]:
    return [
        str(trtllm_serve),
        "serve",
        "{model}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--tp_size",
        "{tp}",
        "--max_seq_len",
        "{max_seq_len}",
        "--max_batch_size",
        "2",
        "--max_num_tokens",
        "16",
        *flags,
        "--extra_llm_api_options",
        "{llm_api_options}",
    ]


def sidecar(trtllm_serve: Path, env: dict[str, str] | None = None, **overrides) -> OpenAIServerEngineConfig:
    overrides.setdefault("coalesce", {"interval_ms": 0})
    return OpenAIServerEngineConfig(
        model="/models/fake",
        command=command(trtllm_serve),
        max_seq_len=4096,
        sampling_extensions=True,
        stats_interval_s=0.05,
        health_timeout_s=0.5,
        env={"FAKE_TRTLLM_STATS_QUIET_S": "1.0", **(env or {})},
        **overrides,
    )


async def started(config: OpenAIServerEngineConfig):
    engine = make_engine(config)
    await engine.start()
    return engine


def request(max_tokens: int = 100, **sampling) -> GenerationRequest:
    return GenerationRequest("r", list(PROMPT), SamplingParams(max_tokens=max_tokens, **sampling))


async def fake_state(engine) -> dict:
    async with httpx.AsyncClient(base_url=engine.base_url) as client:
        return (await client.get("/fake/state")).json()


async def test_prompts_over_max_num_tokens_run_with_the_default_llm_api_options_contract(trtllm_serve):
    """D1: --max_num_tokens 16 and a 20-token prompt: the default llm_api_options YAML turns chunked prefill on."""
    engine = await started(sidecar(trtllm_serve))
    try:
        deltas = [d async for d in engine.generate(request(max_tokens=5, temperature=0.0))]
        assert deltas[-1].finish_reason == FINISH_LENGTH
    finally:
        await engine.shutdown()


async def test_without_chunked_prefill_a_long_prompt_is_the_clients_error_contract(trtllm_serve):
    """D1: trtllm-serve answers 400 with TensorRT-LLM's message (the serve config refuses this setup at deploy
    time; see tests/serve_app/test_config.py)."""
    engine = await started(sidecar(trtllm_serve, llm_api_options={"enable_iter_perf_stats": True}))
    try:
        with pytest.raises(InvalidRequestError, match="should not exceed max_num_tokens"):
            await anext(engine.generate(request()))
    finally:
        await engine.shutdown()


async def test_a_prompt_counts_as_queued_prompt_tokens_until_its_first_output_contract(trtllm_serve):
    """trtllm-serve reports no unprefilled prompt tokens; the adapter counts a request's prompt from its
    submission to its first output (engines/unprefilled.py). The fake's first step comes after FAKE_TRTLLM_STEP_S."""
    engine = await started(sidecar(trtllm_serve, env={"FAKE_TRTLLM_STEP_S": "1.0"}))
    stream = engine.generate(request(max_tokens=100_000, ignore_eos=True))
    try:
        first = asyncio.create_task(anext(stream))
        await wait_for(lambda: engine.stats().queued_prompt_tokens == len(PROMPT))
        await first
        assert engine.stats().queued_prompt_tokens == 0
    finally:
        await stream.aclose()
        await engine.shutdown()
    assert engine.stats().queued_prompt_tokens == 0


async def test_load_under_load_comes_from_the_open_streams_and_one_metrics_poll_at_a_time_contract(trtllm_serve):
    """D2: trtllm-serve holds /metrics until no new iteration came for a while, so while it is busy the load is
    this replica's open streams against the batch slots (--max_batch_size 2); once it is idle the iteration stats
    (enabled by the default llm_api_options) come in. Never more than one /metrics request at a time: a poll given
    up would leave the server's handler reading the stats the next one needs."""
    engine = await started(sidecar(trtllm_serve))
    streams = [engine.generate(request(max_tokens=100_000, ignore_eos=True)) for _ in range(4)]
    try:
        for stream in streams:
            await anext(stream)
        await wait_for(lambda: engine.stats().queued_requests == 2)
        stats = engine.stats()
        assert (stats.running_requests, stats.queued_requests, stats.max_running_requests) == (2, 2, 2)
        assert stats.kv_blocks_total == 0  # unknown while busy, not a stale "empty"
    finally:
        for stream in streams:
            await stream.aclose()
    try:
        await wait_for(lambda: engine.stats().kv_blocks_total == 1000)  # the idle server answers /metrics
        assert engine.stats().running_requests == 0
        assert (await fake_state(engine))["max_concurrent_metrics"] == 1
    finally:
        await engine.shutdown()


async def test_a_stop_string_left_in_the_text_by_the_stop_words_path_never_leaks_contract(trtllm_serve):
    """D5: the executor truncates the stop word's ids only, so 'worl' was streamed before the finishing chunk."""
    engine = await started(sidecar(trtllm_serve))
    try:
        deltas = [d async for d in engine.generate(request(stop=["world"], temperature=0.0))]
        assert "".join(d.text for d in deltas) == "Hello, "
        assert deltas[-1].finish_reason == FINISH_STOP
    finally:
        await engine.shutdown()


async def test_a_timeout_finish_is_not_a_success_contract(trtllm_serve):
    """D7: trtllm-serve passes FinishReason.TIMED_OUT through as 'timeout'."""
    env = {"FAKE_TRTLLM_FINISH_AFTER": "3", "FAKE_TRTLLM_FINISH_REASON": "timeout"}
    engine = await started(sidecar(trtllm_serve, env=env))
    try:
        deltas = [d async for d in engine.generate(request(temperature=0.0))]
        assert deltas[-1].finish_reason == FINISH_ABORT
    finally:
        await engine.shutdown()


def every(interval: int) -> dict:
    """llm_api_options with trtllm-serve's stream_interval (responses every ``interval`` iterations)."""
    return {"llm_api_options": {**DEFAULT_LLM_API_OPTIONS, "stream_interval": interval}}


async def test_completion_tokens_are_the_servers_count_not_the_chunks_contract(trtllm_serve):
    """D8: several tokens a chunk (stream_interval 3); usage comes only when stream_options ask for it."""
    engine = await started(sidecar(trtllm_serve, **every(3)))
    try:
        deltas = [d async for d in engine.generate(request(max_tokens=12, ignore_eos=True, temperature=0.0))]
        assert len([d for d in deltas if d.text]) == 5  # iterations 1, 3, 6, 9 and 12
        assert deltas[-1].completion_tokens == 12
        body = (await fake_state(engine))["last_body"]
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    finally:
        await engine.shutdown()


async def test_greedy_is_sent_as_top_k_1_contract(trtllm_serve):
    """D13: temperature 0 alone is greedy on TensorRT-LLM main but not under 1.0's _greedy_decoding."""
    engine = await started(sidecar(trtllm_serve))
    try:
        [d async for d in engine.generate(request(max_tokens=2, temperature=0.0))]
        body = (await fake_state(engine))["last_body"]
        assert (body["top_k"], body["temperature"]) == (1, 0.0)
    finally:
        await engine.shutdown()


async def test_logprobs_are_asked_for_and_read_back_per_token_contract(trtllm_serve):
    """trtllm-serve's completions stream carries each chunk's logprobs (create_completion_logprobs)."""
    engine = await started(sidecar(trtllm_serve, **every(3)))
    try:
        deltas = [d async for d in engine.generate(request(max_tokens=6, ignore_eos=True, logprobs=1))]
        assert (await fake_state(engine))["last_body"]["logprobs"] == 1
        entries = [entry for d in deltas for entry in d.logprobs or ()]
        assert "".join(e.token for e in entries) == "".join(d.text for d in deltas)
        assert all(e.logprob == -0.25 and len(e.top) == 1 and e.top[0][0] == e.token for e in entries)
    finally:
        await engine.shutdown()


def test_an_empty_max_seq_len_makes_trtllm_serve_exit_at_start_contract(trtllm_serve):
    """D4, the failure: an unset max_seq_len rendered as "" and trtllm-serve's --max_seq_len (click, type=int)
    exits with status 2. The config now refuses it (below), and server_argv refuses a None."""
    argv = [str(trtllm_serve), "serve", "/m", "--max_seq_len", ""]
    assert subprocess.run(argv, capture_output=True, timeout=60).returncode == 2
    with pytest.raises(ValueError, match=r"max_seq_len: is not set, but the command passes \{max_seq_len\}"):
        OpenAIServerEngineConfig(model="/m", command=command(trtllm_serve))
    with pytest.raises(EngineConfigError, match="max_seq_len is not set"):
        server_argv(["serve", "--max_seq_len", "{max_seq_len}"], max_seq_len=None)


def test_the_default_llm_api_options_enable_chunked_prefill_and_iteration_stats():
    """D1 / D2: both are off in TensorRT-LLM by default; the default command passes them in its YAML."""
    config = OpenAIServerEngineConfig(model="/m")
    assert config.llm_api_options == DEFAULT_LLM_API_OPTIONS
    assert DEFAULT_LLM_API_OPTIONS == {"enable_chunked_prefill": True, "enable_iter_perf_stats": True}
    assert "{llm_api_options}" in config.command
    assert config.prefill_token_limit() is None


def test_llm_api_options_the_command_does_not_pass_are_refused():
    with pytest.raises(ValueError, match="llm_api_options: is set, but the command does not pass"):
        OpenAIServerEngineConfig(model="/m", command=["trtllm-serve", "serve", "{model}"], llm_api_options={"a": 1})


def test_pytorch_only_options_on_the_tensorrt_backend_are_refused():
    cmd = ["trtllm-serve", "serve", "{model}", "--backend", "tensorrt", "--extra_llm_api_options", "{llm_api_options}"]
    with pytest.raises(ValueError, match="enable_chunked_prefill, enable_iter_perf_stats: PyTorch-backend"):
        OpenAIServerEngineConfig(model="/m", command=cmd)
    assert OpenAIServerEngineConfig(model="/m", command=cmd, llm_api_options={}).trtllm_loader() == "tensorrt"


async def wait_for(condition, timeout_s: float = 20.0) -> None:
    import asyncio

    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


GUIDED_OPTIONS = {**DEFAULT_LLM_API_OPTIONS, "guided_decoding_backend": "xgrammar"}
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}


@pytest.mark.parametrize(
    ("guided", "sent", "written"),
    [
        (GuidedDecoding("json", WEATHER), {"type": "json", "schema": WEATHER}, '{"city": "Paris"}'),
        (GuidedDecoding("json_object"), {"type": "json_object"}, "{}"),
    ],
)
async def test_structured_output_is_sent_in_trtllm_serves_form_contract(trtllm_serve, guided, sent, written):
    engine = await started(sidecar(trtllm_serve, structured_output=True, llm_api_options=GUIDED_OPTIONS))
    try:
        deltas = [d async for d in engine.generate(request(guided=guided))]
        assert (await fake_state(engine))["last_body"]["response_format"] == sent
        assert "".join(d.text for d in deltas) == written  # the fake enforces it: it has a guided decoder
    finally:
        await engine.shutdown()


async def test_structured_output_not_configured_is_refused_naming_the_field_contract(trtllm_serve):
    engine = await started(sidecar(trtllm_serve))
    try:
        for guided in (GuidedDecoding("json_object"), GuidedDecoding("json", WEATHER, param="tool_choice")):
            with pytest.raises(InvalidRequestError) as err:
                [d async for d in engine.generate(request(guided=guided))]
            assert err.value.param == guided.param
        assert (await fake_state(engine))["last_body"] is None  # refused before the server saw it
    finally:
        await engine.shutdown()


def test_structured_output_without_a_guided_decoding_backend_is_refused_at_deploy_time(trtllm_serve):
    # trtllm-serve would accept response_format and, without a guided decoder, ignore it.
    with pytest.raises(ValueError, match="structured_output: needs trtllm-serve started with a guided decoding"):
        sidecar(trtllm_serve, structured_output=True)
    assert {"response_format", "tool_choice"} <= sidecar(
        trtllm_serve, structured_output=True, llm_api_options=GUIDED_OPTIONS
    ).sampling_fields()
    assert "response_format" not in sidecar(trtllm_serve).sampling_fields()


def test_other_servers_get_openais_json_schema_form():
    guided = GuidedDecoding("json", WEATHER)
    assert response_format(guided, trtllm_serve=False) == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": WEATHER, "strict": True},
    }
    with pytest.raises(InvalidRequestError):  # OpenAI's response_format has no regex
        response_format(GuidedDecoding("regex", "[0-9]+"), trtllm_serve=False)


async def test_stream_interval_sends_the_first_token_at_once_then_every_n_iterations_contract(trtllm_serve):
    """trtllm-serve's own stream_interval (llm_api_options): one SSE event per 4 iterations after the first, so
    the replica parses a quarter of the events; the text and the token count are the same as at 1."""
    texts = {}
    for interval in (1, 4):
        engine = await started(sidecar(trtllm_serve, **every(interval)))
        try:
            deltas = [d async for d in engine.generate(request(max_tokens=10, ignore_eos=True, temperature=0.0))]
            texts[interval] = [d.text for d in deltas if d.text]
            assert deltas[-1].completion_tokens == 10
        finally:
            await engine.shutdown()
    assert [len(t) for t in texts[4]] == [1, 3, 4, 2]  # iterations 1, 4, 8 and the last (10)
    assert len(texts[1]) == 10
    assert "".join(texts[4]) == "".join(texts[1])


def test_stream_interval_is_refused_for_the_tensorrt_backend_at_deploy_time(trtllm_serve):
    """A TorchLlmArgs field: the TensorRT backend's argument model has none and forbids unknown ones."""
    with pytest.raises(ValueError, match="stream_interval: PyTorch-backend arguments"):
        OpenAIServerEngineConfig(
            model="/m",
            command=[*command(trtllm_serve), "--backend", "tensorrt"],
            max_seq_len=4096,
            llm_api_options={"stream_interval": 4},
        )
    argv = [str(trtllm_serve), "serve", "/m", "--backend", "tensorrt", "--extra_llm_api_options"]
    options = trtllm_serve.parent / "stream-interval.yaml"
    options.write_text("stream_interval: 4\n")
    assert subprocess.run([*argv, str(options)], capture_output=True, timeout=60).returncode != 0


def test_the_production_sidecars_stream_every_few_iterations():
    """configs/gpu-trtllm-serve.yaml sets stream_interval so that N decode steps stay within the coalescing
    interval (docs/tensorrt-llm.md): fewer SSE events for the replica to parse, no later first token."""
    from serve_app.config import load_config_file

    config = load_config_file(Path(__file__).resolve().parents[2] / "configs" / "gpu-trtllm-serve.yaml")
    for variant in config.variants:
        engine = variant.engine
        assert isinstance(engine, OpenAIServerEngineConfig)
        assert engine.llm_api_options.get("stream_interval", 1) > 1, variant.name


# --- the KV cache as the router sees it ----------------------------------------------------------------------------
# The fake server keeps a prefix cache and answers POST /kv_cache_events as trtllm-serve does (fakes/fake_kv_cache.py,
# fakes/trtllm_serve.py). What it cannot prove: TensorRT-LLM's own block hash (never used), when exactly the real
# engine stores blocks, and the real server's timing of the events against the tokens.

LONG_PROMPT = list(range(1000, 1070))  # 70 tokens: two whole 32-token blocks and a partial one
KV_ENV = {"FAKE_TRTLLM_KV_EVENTS_QUIET_S": "0.2"}


def long_request(prompt: list[int] = LONG_PROMPT) -> GenerationRequest:
    return GenerationRequest("r", list(prompt), SamplingParams(max_tokens=3, temperature=0.0))


async def held_blocks(engine, until, held: set[int] | None = None) -> set[int]:
    """The replica's blocks as a router keeps them (engines/kv_blocks.py KvEvents.apply_to), once ``until`` holds."""
    held = set() if held is None else held

    def drained() -> bool:
        engine.kv_events().apply_to(held)
        return until(held)

    await wait_for(drained)
    return held


async def test_kv_cache_events_reach_the_router_as_its_block_hashes_contract(trtllm_serve):
    engine = await started(sidecar(trtllm_serve, env=KV_ENV))
    try:
        assert engine.kv_block_tokens == 32
        await asyncio.sleep(0.5)  # polls before the first request: trtllm-serve answers them 500
        [d async for d in engine.generate(long_request())]
        wanted = set(block_hashes(LONG_PROMPT, 32))  # what the router computes from the prompt
        assert await held_blocks(engine, lambda held: wanted <= held) == wanted  # the partial block is none
        assert engine.stats().cached_blocks == 2
        state = await fake_state(engine)
        assert state["kv_events_calls"] > 1 and state["max_concurrent_kv_events"] == 1
    finally:
        await engine.shutdown()


async def test_evicted_blocks_come_back_out_of_the_router_contract(trtllm_serve):
    engine = await started(sidecar(trtllm_serve, env={**KV_ENV, "FAKE_TRTLLM_KV_BLOCKS": "2"}))
    first, second = LONG_PROMPT[:64], list(range(5000, 5064))
    try:
        [d async for d in engine.generate(long_request(first))]
        held = await held_blocks(engine, lambda held: set(block_hashes(first, 32)) <= held)
        [d async for d in engine.generate(long_request(second))]
        held = await held_blocks(engine, lambda held: set(block_hashes(second, 32)) <= held, held)
        assert held == set(block_hashes(second, 32))  # the first prompt's blocks were evicted, and said so
    finally:
        await engine.shutdown()


async def test_cached_tokens_come_from_the_servers_usage_contract(trtllm_serve):
    engine = await started(sidecar(trtllm_serve))
    try:
        cold = [d async for d in engine.generate(long_request())]
        warm = [d async for d in engine.generate(long_request())]
        assert (cold[-1].cached_tokens, warm[-1].cached_tokens) == (0, 64)  # two whole blocks reused
        stats = engine.stats()
        assert (stats.cache_hit_tokens, stats.cache_prompt_tokens) == (64, 2 * len(LONG_PROMPT))
    finally:
        await engine.shutdown()


async def test_cached_tokens_arrive_with_the_final_usage_without_extensions_contract(trtllm_serve):
    """Without sampling_extensions usage comes only in the final usage-only chunk: the finishing delta has it."""
    engine = await started(sidecar(trtllm_serve).model_copy(update={"sampling_extensions": False}))
    try:
        [d async for d in engine.generate(long_request())]
        warm = [d async for d in engine.generate(long_request())]
        assert warm[-1].finished and warm[-1].cached_tokens == 64
    finally:
        await engine.shutdown()


async def test_older_servers_without_cached_tokens_leave_them_unknown_contract(trtllm_serve):
    engine = await started(sidecar(trtllm_serve, env={"FAKE_TRTLLM_NO_CACHED_TOKENS": "1"}))
    try:
        deltas = [d async for d in engine.generate(long_request())]
        assert {d.cached_tokens for d in deltas} == {None}
    finally:
        await engine.shutdown()


async def test_kv_cache_events_off_poll_nothing_contract(trtllm_serve):
    engine = await started(sidecar(trtllm_serve, kv_cache_events=False))
    try:
        [d async for d in engine.generate(long_request())]
        await asyncio.sleep(0.3)
        assert engine.kv_block_tokens is None and engine.kv_events() is None
        assert (await fake_state(engine))["kv_events_calls"] == 0
    finally:
        await engine.shutdown()


def test_the_server_is_started_with_an_event_buffer(trtllm_serve):
    """trtllm-serve keeps no events by default (KvCacheConfig.event_buffer_max_size 0): the YAML turns them on."""
    options = sidecar(trtllm_serve).server_llm_api_options()
    assert options == {**DEFAULT_LLM_API_OPTIONS, "kv_cache_config": {"event_buffer_max_size": 2048}}
    mine = {**DEFAULT_LLM_API_OPTIONS, "kv_cache_config": {"event_buffer_max_size": 64, "tokens_per_block": 16}}
    config = sidecar(trtllm_serve, llm_api_options=mine)
    assert config.server_llm_api_options() == mine and config.kv_block_tokens() == 16
    assert sidecar(trtllm_serve, kv_cache_events=False).server_llm_api_options() == DEFAULT_LLM_API_OPTIONS
