"""The ``openai_server`` backend against a real engine server: ``transformers serve`` as the sidecar command.

trtllm-serve cannot run here; transformers serve (continuous batching, CPU) speaks the same OpenAI
completions protocol, streams SSE, and aborts a request whose client disconnects. It is strict (422 on
non-standard fields, string prompts only), which is why these tests use prompt_format 'text' and leave
sampling_extensions off.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bench.commands import find_command
from core.errors import EngineConfigError, EngineDeadError, InvalidRequestError
from engines.config import OpenAIServerEngineConfig
from engines.factory import make_engine
from engines.openai_server import completion_body, parse_logprobs, parse_metrics, server_argv
from engines.protocol import FINISH_LENGTH, FINISH_STOP, GenerationRequest, SamplingParams
from tests.bench.fake_openai import ServerThread

TRANSFORMERS_SERVE = [
    find_command("transformers") or "transformers",
    "serve",
    "--continuous-batching",
    "--device",
    "cpu",
    # A bounded KV cache: sized from free memory, it grows to ~11 GB and shares the machine badly.
    "--cb-block-size",
    "32",
    "--cb-num-blocks",
    "1100",
    "--cb-max-batch-tokens",
    "256",
    "--host",
    "{host}",
    "--port",
    "{port}",
    "{model}",
]
LONG_CONTEXT = 32768


@pytest.fixture(scope="module")
def endless_model(tmp_path_factory) -> Path:
    """builtin:tiny that never stops by itself: no reachable end-of-sequence id and a long context.

    A cancelled request would otherwise run to its 30000 tokens (a minute or more here), so a server
    that goes idle right after the cancel shows that the cancel reached it.
    """
    from engines.model_ref import resolve_model

    target = tmp_path_factory.mktemp("endless") / "model"
    shutil.copytree(resolve_model("builtin:tiny"), target)
    config = json.loads((target / "config.json").read_text())
    never = config["vocab_size"] + 1000  # an id the model cannot produce
    config.update(max_position_embeddings=LONG_CONTEXT, eos_token_id=never)
    (target / "config.json").write_text(json.dumps(config))
    generation = target / "generation_config.json"
    settings = json.loads(generation.read_text()) if generation.exists() else {}
    settings["eos_token_id"] = never
    generation.write_text(json.dumps(settings))
    return target


def sidecar_config(model: Path, **overrides) -> OpenAIServerEngineConfig:
    overrides.setdefault("coalesce", {"interval_ms": 0})
    return OpenAIServerEngineConfig(
        model=str(model), command=TRANSFORMERS_SERVE, prompt_format="text", startup_timeout_s=300, **overrides
    )


@pytest.fixture(scope="module")
async def sidecar(endless_model):
    engine = make_engine(sidecar_config(endless_model))
    await engine.start()
    try:
        yield engine
    finally:
        await engine.shutdown()


@pytest.fixture(scope="module")
def tokenizer(endless_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(endless_model)


def request(tokenizer, text: str = "The quick brown fox", **sampling) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    ids = tokenizer(text)["input_ids"]
    return GenerationRequest(f"req-{time.monotonic_ns()}", ids, SamplingParams(**sampling))


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_streams_deltas_from_the_sidecar(sidecar, tokenizer):
    deltas = [d async for d in sidecar.generate(request(tokenizer, max_tokens=24))]
    assert deltas[-1].finish_reason == FINISH_LENGTH
    assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)
    assert deltas[-1].completion_tokens == 24  # the server's usage
    assert len([d for d in deltas if d.text]) > 1  # streamed, not one blob
    assert "".join(d.text for d in deltas).strip()
    assert sidecar.context_length == LONG_CONTEXT  # from the checkpoint's config.json
    assert sidecar.process is not None and sidecar.process.poll() is None


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_stop_string_is_cut_and_never_leaks(sidecar, tokenizer):
    full = "".join([d.text async for d in sidecar.generate(request(tokenizer, max_tokens=24))])
    stop = full[8:11]  # greedy decoding: the same text comes again
    assert stop.strip() and full.find(stop) >= 1
    deltas = [d async for d in sidecar.generate(request(tokenizer, max_tokens=24, stop=[stop]))]
    assert "".join(d.text for d in deltas) == full[: full.find(stop)]
    assert deltas[-1].finish_reason == FINISH_STOP


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_non_standard_sampling_fields_are_refused_before_the_server(sidecar, tokenizer):
    with pytest.raises(InvalidRequestError) as err:
        await anext(sidecar.generate(request(tokenizer, max_tokens=4, top_k=5)))
    assert err.value.param == "top_k"


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_the_servers_4xx_is_an_invalid_request(endless_model, sidecar, tokenizer):
    # Same server, reached by URL, this time sending the extensions transformers serve refuses (422).
    engine = make_engine(sidecar_config(endless_model, url=sidecar.base_url, sampling_extensions=True))
    await engine.start()
    assert engine.process is None  # nothing to manage
    with pytest.raises(InvalidRequestError, match="422"):
        await anext(engine.generate(request(tokenizer, max_tokens=4, ignore_eos=True)))
    await engine.shutdown()
    await sidecar.check_health()  # closing a URL engine leaves the server alone


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_cancelling_the_stream_ends_the_request_in_the_sidecar(sidecar, tokenizer):
    server = psutil.Process(sidecar.process.pid)
    stream = sidecar.generate(request(tokenizer, max_tokens=30_000, temperature=1.0))
    first = await anext(stream)
    assert first.finish_reason is None
    await stream.aclose()
    # Generating 30000 tokens keeps the server busy for minutes (~0.35 cores here); aborted, it idles at ~0.
    await wait_until_idle(server, deadline_s=30)
    # And it still serves.
    deltas = [d async for d in sidecar.generate(request(tokenizer, max_tokens=4))]
    assert deltas[-1].finish_reason == FINISH_LENGTH
    assert sidecar.stats().running_requests == 0


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_a_sidecar_killed_mid_stream_fails_the_stream_and_the_health_check(endless_model, tokenizer):
    engine = make_engine(sidecar_config(endless_model))
    await engine.start()
    try:
        await engine.check_health()
        stream = engine.generate(request(tokenizer, max_tokens=30_000, temperature=1.0))
        await anext(stream)
        os.kill(engine.process.pid, signal.SIGKILL)
        with pytest.raises(EngineDeadError, match="died"):
            async for _ in stream:
                pass
        with pytest.raises(EngineDeadError, match="exit code -9"):
            await engine.check_health()
        assert not engine.stats().healthy
        with pytest.raises(EngineDeadError):
            await anext(engine.generate(request(tokenizer, max_tokens=4)))
    finally:
        await engine.shutdown()


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_a_server_that_exits_while_starting_is_a_config_error_with_its_output(tmp_path):
    crash = [sys.executable, "-c", "import sys; print('CUDA error: no GPU found', file=sys.stderr); sys.exit(3)"]
    engine = make_engine(OpenAIServerEngineConfig(model=str(tmp_path / "absent"), command=crash))
    with pytest.raises(EngineConfigError) as err:
        await engine.start()
    assert "exit code 3" in str(err.value)
    assert "CUDA error: no GPU found" in str(err.value)


async def test_a_missing_server_program_is_a_config_error(tmp_path):
    engine = make_engine(
        OpenAIServerEngineConfig(model=str(tmp_path / "m"), command=["no-such-trtllm-serve", "{model}"])
    )
    with pytest.raises(EngineConfigError, match="no-such-trtllm-serve"):
        await engine.start()


def test_the_default_command_is_trtllm_serve():
    command = OpenAIServerEngineConfig(model="/m").command
    argv = server_argv(command, model="/m", host="127.0.0.1", port=8, tp=4, llm_api_options="/tmp/o.yaml")
    assert argv == [
        "trtllm-serve",
        "serve",
        "/m",
        "--host",
        "127.0.0.1",
        "--port",
        "8",
        "--tp_size",
        "4",
        "--extra_llm_api_options",  # chunked prefill and iteration stats (docs/tensorrt-llm.md)
        "/tmp/o.yaml",
    ]


def test_unknown_command_placeholders_are_refused():
    with pytest.raises(ValueError, match="unknown placeholder"):
        OpenAIServerEngineConfig(model="/m", command=["serve", "{modle}"])


def test_the_request_body_is_standard_openai_unless_extensions_are_on():
    req = GenerationRequest("r", [1, 2], SamplingParams(max_tokens=7, temperature=0.5, seed=3, stop=["\n"]))
    body = completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=False)
    assert body == {
        "model": "m",
        "prompt": [1, 2],
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 1.0,
        "stream": True,
        "seed": 3,
        "stop": ["\n"],
        "stream_options": {"include_usage": True},  # the server's token count, in a final usage chunk
    }
    req.sampling.top_k, req.sampling.ignore_eos = 20, True
    body = completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=True)
    assert (body["top_k"], body["ignore_eos"]) == (20, True)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_penalties_and_logit_bias_are_passed_through_and_the_extensions_only_when_on():
    sampling = SamplingParams(
        max_tokens=7, presence_penalty=0.5, frequency_penalty=-1.0, logit_bias={42: -100.0}, seed=1
    )
    req = GenerationRequest("r", [1, 2], sampling)
    body = completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=False)
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -1.0)
    assert body["logit_bias"] == {"42": -100.0}  # JSON object keys are strings
    req.sampling.repetition_penalty, req.sampling.min_tokens = 1.2, 3
    with pytest.raises(InvalidRequestError) as err:
        completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=False)
    assert err.value.param == "repetition_penalty"
    body = completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=True)
    assert (body["repetition_penalty"], body["min_tokens"]) == (1.2, 3)


def test_neutral_penalties_are_not_sent():
    req = GenerationRequest("r", [1, 2], SamplingParams(max_tokens=7, repetition_penalty=1.0, logit_bias={3: 0.0}))
    body = completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=True)
    assert not {"presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens", "logit_bias"} & set(body)


def test_logprobs_are_asked_for_only_from_servers_known_to_stream_them():
    req = GenerationRequest("r", [1, 2], SamplingParams(max_tokens=7, logprobs=0))
    # 0 reads as off in TensorRT-LLM: 1 is asked for, the alternative trimmed back when read.
    assert completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=True)["logprobs"] == 1
    with pytest.raises(InvalidRequestError) as err:
        completion_body(req, model="m", prompt=[1, 2], max_tokens=7, extensions=False)
    assert err.value.param == "logprobs"
    plain = GenerationRequest("r", [1, 2], SamplingParams(max_tokens=7))
    assert "logprobs" not in completion_body(plain, model="m", prompt=[1, 2], max_tokens=7, extensions=True)


def test_a_chunks_logprobs_are_read_one_entry_per_token():
    block = {
        "tokens": ["He", "llo"],
        "token_logprobs": [-0.5, None],
        "top_logprobs": [{"He": -0.5, "Ha": -1.5}, None],
        "text_offset": [0, 2],
    }
    entries = parse_logprobs(block)
    assert entries is not None and [e.token for e in entries] == ["He", "llo"]
    assert entries[0].top == (("He", -0.5), ("Ha", -1.5))
    assert entries[1].logprob == -9999.0 and entries[1].top == ()  # unscored: trtllm-serve's floor
    assert parse_logprobs(None) is None and parse_logprobs({"content": []}) is None
    only_own = parse_logprobs(block, alternatives=0)
    assert only_own is not None and only_own[0].top == () and only_own[0].logprob == -0.5


def test_the_sidecar_declares_the_extensions_only_when_it_may_send_them():
    plain = OpenAIServerEngineConfig(model="/m").sampling_fields()
    extended = OpenAIServerEngineConfig(model="/m", sampling_extensions=True).sampling_fields()
    assert {"presence_penalty", "frequency_penalty", "logit_bias", "seed"} <= plain
    assert not {"repetition_penalty", "min_tokens", "top_k"} & plain
    assert {"repetition_penalty", "min_tokens", "top_k", "ignore_eos", "stop_token_ids"} <= extended


def test_trtllm_serve_iteration_stats_are_read():
    stats = [
        {"iter": 1, "numActiveRequests": 5, "numQueuedRequests": 2, "kvCacheStats": {"usedNumBlocks": 10}},
        {
            "iter": 2,
            "numActiveRequests": 3,
            "numQueuedRequests": 1,
            "kvCacheStats": {"usedNumBlocks": 7, "maxNumBlocks": 100},
        },
    ]
    load = parse_metrics("application/json", json.dumps(stats), open_requests=4)
    assert (load.running, load.queued, load.kv_used, load.kv_total) == (3, 1, 7, 100)
    assert load.max_running == 0  # not in these entries: unknown
    assert parse_metrics("application/json", "[]", open_requests=4) is None  # nothing new since last read


def test_vllm_prometheus_metrics_are_read():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 6.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="m"} 2.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
    )
    load = parse_metrics("text/plain; version=0.0.4", text, open_requests=0)
    assert (load.running, load.queued, load.kv_used, load.kv_total) == (6, 2, 250, 1000)
    assert parse_metrics("text/plain", "# nothing we know\n", open_requests=0) is None


VLLM_METRICS = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 0.0\n'
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    'vllm:kv_cache_usage_perc{model_name="m"} 0.0\n'
)
IDLE_ITERATION_STATS = [
    {"iter": 9, "numActiveRequests": 0, "maxNumActiveRequests": 64, "kvCacheStats": {"maxNumBlocks": 500}},
]


def metrics_server(content_type: str, body: str) -> ServerThread:
    """A running engine server's health and metrics endpoints, answering ``body`` on /metrics."""

    async def health(request):
        return PlainTextResponse("ok")

    async def metrics(request):
        return Response(body, media_type=content_type)

    return ServerThread(Starlette(routes=[Route("/health", health), Route("/metrics", metrics)]))


@pytest.mark.parametrize(
    ("content_type", "body", "kv_total", "max_running"),
    [("text/plain", VLLM_METRICS, 1000, 0), ("application/json", json.dumps(IDLE_ITERATION_STATS), 500, 64)],
    ids=["vllm", "trtllm-serve"],
)
@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_what_the_server_says_of_its_capacity_is_known_when_start_returns(
    content_type, body, kv_total, max_running
):
    with metrics_server(content_type, body) as server:
        engine = make_engine(OpenAIServerEngineConfig(model="m", url=server.url, max_seq_len=256))
        await engine.start()
        try:
            stats = engine.stats()
            assert (stats.kv_blocks_total, stats.max_running_requests) == (kv_total, max_running)
            assert stats.context_length == 256
        finally:
            await engine.shutdown()


async def wait_until_idle(process: psutil.Process, *, deadline_s: float, busy_cores: float = 0.1) -> None:
    """Returns once ``process`` (and its children) use less than ``busy_cores`` CPUs over half a second."""

    def cpu_seconds() -> float:
        total = 0.0
        for p in [process, *process.children(recursive=True)]:
            times = p.cpu_times()
            total += times.user + times.system
        return total

    end = time.monotonic() + deadline_s
    while True:
        before = cpu_seconds()
        await asyncio.sleep(0.5)
        if (cpu_seconds() - before) / 0.5 < busy_cores:
            return
        assert time.monotonic() < end, f"the server is still busy {deadline_s:g} s after the cancel"


def test_a_custom_command_survives_the_replicas_revalidation():
    """build_app dumps each variant and the replica validates the dump again, where every field counts as set: a
    command without {llm_api_options} (transformers serve, vLLM) must still validate there."""
    config = sidecar_config(Path("/models/m"))
    again = OpenAIServerEngineConfig.model_validate(config.model_dump(mode="json"))
    assert again == config
    with pytest.raises(ValueError, match="llm_api_options: is set, but the command does not pass"):
        sidecar_config(Path("/models/m"), llm_api_options={"stream_interval": 4})
