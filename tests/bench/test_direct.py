import pytest

from bench.client import MonotonicClock
from bench.direct import measure_request, run_direct
from bench.prompt_pairs import prompt_pairs, request_specs
from engines.config import EmulatedEngineConfig, HFEngineConfig
from engines.emulated import EmulatedEngine
from engines.hf import HFEngine
from engines.protocol import SamplingParams
from traffic.summary import summarize
from traffic.workload import RequestSpec, Slo


@pytest.fixture(scope="module")
async def engine():
    eng = HFEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=2, max_running_requests=4))
    await eng.start()
    yield eng
    await eng.shutdown()


async def test_every_request_runs_to_max_tokens_and_is_recorded(engine):
    specs = request_specs(prompt_pairs(engine.tokenizer, 6, 12), 9, as_text=False)
    result = await run_direct(engine, specs, 3, SamplingParams(temperature=1.0))
    assert sorted(r.index for r in result.records) == list(range(6))  # each spec taken exactly once
    for record in result.records:
        assert record.ok
        assert record.output_tokens == 9  # ignore_eos: the full length, as the HTTP paths ask for
        assert record.prompt_tokens == 12
        assert 0 < record.ttft_s <= record.e2e_s
        assert record.chunks == len(record.itl_s) + 1
    summary = summarize(result.records)
    assert summary.output_tokens == 54
    assert result.duration_s == pytest.approx(max(r.end_s for r in result.records))


async def test_an_engine_refusal_becomes_a_failed_record(engine):
    too_long = request_specs(prompt_pairs(engine.tokenizer, 1, 12), engine.context_length, as_text=False)
    result = await run_direct(engine, too_long, 1, SamplingParams())
    (record,) = result.records
    assert not record.ok
    assert record.error_type == "ContextTooLongError"
    assert record.output_tokens == 0


async def test_a_chunk_is_timed_when_text_arrives_as_an_sse_client_times_it():
    # The engine alone is held to what a client can see: seed 36's first token is half a character (no text),
    # so its first chunk is the next token's, as the HTTP paths' SSE reader (bench/client.py) counts it.
    config = EmulatedEngineConfig(
        preset="cpu-builtin-tiny",
        profile={"step_ms_at_batch_1": 1.0},
        startup_time_scale=0.0,
        coalesce={"interval_ms": 0},
    )
    emulated = EmulatedEngine(config)
    await emulated.start()
    try:
        ids = emulated.tokenizer.encode("The lighthouse keeper", add_special_tokens=False)
        spec = RequestSpec(index=0, send_at=None, prompt=ids, prompt_tokens=len(ids), max_tokens=3, slo=Slo())
        clock = MonotonicClock()
        record = await measure_request(
            emulated,
            spec,
            SamplingParams(max_tokens=3, seed=36, ignore_eos=True),
            request_id="r",
            clock=clock,
            run_start=clock.now(),
            wall_start=0.0,
        )
    finally:
        await emulated.shutdown()
    assert record.output_tokens == 3
    assert record.chunks == 2 and len(record.itl_s) == 1  # three deltas: '', '凉快', '。'
