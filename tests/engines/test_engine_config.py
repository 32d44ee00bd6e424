"""Engine configs: the hf engine's thread count for a replica (engines.config.HFEngineConfig.for_replica), and the
TensorRT-LLM backends' KV cache events."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from engines.config import (
    DEFAULT_KV_EVENT_BUFFER,
    DEFAULT_LLM_API_OPTIONS,
    GPU_ENGINE_MIN_THREADS,
    HFEngineConfig,
    OpenAIServerEngineConfig,
    TRTLLMEngineConfig,
)
from serve_app.config import format_validation_error


def test_a_cpu_replica_gets_its_reserved_cpus_rounded_up():
    config = HFEngineConfig(model="builtin:tiny")
    assert config.for_replica(0.5, 0).num_threads == 1
    assert config.for_replica(2.0, 0).num_threads == 2
    assert config.for_replica(2.5, 0).num_threads == 3


def test_a_gpu_replica_gets_a_few_threads_even_with_one_cpu():
    config = HFEngineConfig(model="builtin:tiny")
    assert config.for_replica(1.0, 1).num_threads == min(GPU_ENGINE_MIN_THREADS, os.cpu_count() or 1)
    assert config.for_replica(32.0, 1).num_threads == 32  # a bigger reservation wins


def test_a_configured_thread_count_is_kept():
    config = HFEngineConfig(model="builtin:tiny", num_threads=3)
    assert config.for_replica(16.0, 1) is config


# --- TensorRT-LLM's KV cache events (engines/trtllm_kv_events.py) ---------------------------------------------------


def problems(build) -> list[str]:
    """The deploy-time messages (serve_app/config.py ``format_validation_error``: '<field path>: <message>')."""
    with pytest.raises(ValidationError) as err:
        build()
    return format_validation_error(err.value)


def test_trtllm_asks_for_kv_cache_events_by_default():
    kv = TRTLLMEngineConfig(model="/m").kv_cache
    assert (kv.event_buffer_max_size, kv.tokens_per_block, kv.kv_events) == (DEFAULT_KV_EVENT_BUFFER, 32, True)
    assert DEFAULT_KV_EVENT_BUFFER > 0  # precise prefix routing unless turned off


def test_trtllm_kv_cache_events_without_block_reuse_fail_naming_the_field():
    (message,) = problems(lambda: TRTLLMEngineConfig(model="/m", kv_cache={"enable_block_reuse": False}))
    assert message.startswith("kv_cache: event_buffer_max_size: is 2048, but KV cache events need enable_block_reuse")
    off = TRTLLMEngineConfig(model="/m", kv_cache={"enable_block_reuse": False, "event_buffer_max_size": 0})
    assert not off.kv_cache.kv_events


def test_trtllm_serve_started_here_sends_kv_cache_events_by_default():
    config = OpenAIServerEngineConfig(model="/m")
    assert config.kv_cache_events is None and config.kv_events_enabled() and config.kv_block_tokens() == 32
    assert config.server_llm_api_options()["kv_cache_config"] == {"event_buffer_max_size": DEFAULT_KV_EVENT_BUFFER}


@pytest.mark.parametrize(
    "overrides",
    [
        {"url": "http://127.0.0.1:9"},  # a running server's event buffer is not ours to turn on
        {"command": ["vllm", "serve", "{model}", "--port", "{port}"], "llm_api_options": DEFAULT_LLM_API_OPTIONS},
        {"command": ["trtllm-serve", "serve", "{model}", "--port", "{port}"]},  # no {llm_api_options}: no buffer
        {"llm_api_options": {**DEFAULT_LLM_API_OPTIONS, "kv_cache_config": {"enable_block_reuse": False}}},
        {"llm_api_options": {**DEFAULT_LLM_API_OPTIONS, "kv_cache_config": {"event_buffer_max_size": 0}}},
        {"kv_cache_events": False},
    ],
)
def test_kv_cache_events_are_off_where_the_server_cannot_send_them(overrides):
    config = OpenAIServerEngineConfig(model="/m", **overrides)
    assert not config.kv_events_enabled()
    assert config.server_llm_api_options() == config.llm_api_options  # written as given


def test_kv_cache_events_asked_for_without_block_reuse_fail_naming_the_field():
    no_reuse = {**DEFAULT_LLM_API_OPTIONS, "kv_cache_config": {"enable_block_reuse": False}}
    (message,) = problems(lambda: OpenAIServerEngineConfig(model="/m", kv_cache_events=True, llm_api_options=no_reuse))
    # The engine's path comes before it in a serve config: variants[i].engine: llm_api_options.kv_cache_config...
    assert message.startswith("<config>: llm_api_options.kv_cache_config.enable_block_reuse: is false, but kv_cac")
    no_buffer = {**DEFAULT_LLM_API_OPTIONS, "kv_cache_config": {"event_buffer_max_size": 0}}
    (message,) = problems(lambda: OpenAIServerEngineConfig(model="/m", kv_cache_events=True, llm_api_options=no_buffer))
    assert message.startswith("<config>: llm_api_options.kv_cache_config.event_buffer_max_size: is 0")


def test_kv_cache_events_of_a_running_server_are_read_when_asked_for():
    config = OpenAIServerEngineConfig(model="/m", url="http://127.0.0.1:9", kv_cache_events=True)
    assert config.kv_events_enabled() and config.kv_block_tokens() == 32
