import pytest

from bench.direct import run_direct
from bench.prompt_pairs import prompt_pairs, request_specs
from engines.config import HFEngineConfig
from engines.hf import HFEngine
from engines.protocol import SamplingParams
from traffic.summary import summarize


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
