"""The emulated engine: the engine contract with real token ids and real text, and no model work.

It runs in-process on the test's event loop with no start-up delay. Nothing here asserts a timing: how closely
it keeps its profile's time is what ``python -m bench overhead --model emulated:<preset> --paths direct``
measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from core.errors import ContextTooLongError, EngineDeadError, InvalidRequestError, OverloadedError
from engines.config import EmulatedEngineConfig
from engines.emulated import EmulatedEngine
from engines.presets import PRESETS
from engines.protocol import Delta, GenerationRequest, SamplingParams

FAST = {"step_ms_at_batch_1": 1.0, "step_ms_per_extra_seq": 0.1, "context_length": 8192}  # quick, long


def config(**fields) -> EmulatedEngineConfig:
    values = {"preset": "cpu-builtin-tiny", "profile": FAST, "startup_time_scale": 0.0, **fields}
    return EmulatedEngineConfig(**values)


@contextlib.asynccontextmanager
async def running(**fields):
    engine = EmulatedEngine(config(**fields))
    await engine.start()
    try:
        yield engine
    finally:
        await engine.shutdown()


def request(
    engine: EmulatedEngine, text: str = "The lighthouse keeper", rid: str = "r", **sampling
) -> GenerationRequest:
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    return GenerationRequest(request_id=rid, prompt_token_ids=ids, sampling=SamplingParams(**sampling))


async def collect(engine: EmulatedEngine, req: GenerationRequest) -> list[Delta]:
    async with contextlib.aclosing(engine.generate(req)) as stream:
        return [d async for d in stream]


async def test_streams_real_text_of_its_tokenizer_to_max_tokens():
    async with running() as engine:
        deltas = await collect(engine, request(engine, max_tokens=40, ignore_eos=True, seed=1))
    ids = [t for d in deltas for t in d.token_ids]
    assert len(ids) == 40 and deltas[-1].completion_tokens == 40
    assert deltas[-1].finish_reason == "length"
    assert "".join(d.text for d in deltas) == engine.tokenizer.decode(ids, skip_special_tokens=True)
    assert deltas[0].first_token_time is not None and deltas[-1].prompt_tokens > 0


async def test_its_tokenizer_without_transformers_gives_transformers_ids_text_and_eos():
    # The engine loads tokenizer.json with the tokenizers library alone (a replica's start costs no transformers
    # import); the ingress, which tokenizes prompts, may use transformers' AutoTokenizer on the same files.
    from transformers import AutoTokenizer

    from engines.model_ref import resolve_model

    reference = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny"))
    async with running() as engine:
        deltas = await collect(engine, request(engine, max_tokens=200, ignore_eos=True, seed=3))
        ours = engine.tokenizer
    ids = [t for d in deltas for t in d.token_ids]

    assert "".join(d.text for d in deltas) == reference.decode(ids, skip_special_tokens=True)
    assert ours.eos_token_id == reference.eos_token_id and len(ours) == len(reference)
    assert ours.encode("Le phare, 灯塔.", add_special_tokens=False) == reference.encode(
        "Le phare, 灯塔.", add_special_tokens=False
    )


async def test_the_same_seed_gives_the_same_output_and_another_seed_another():
    async with running() as engine:
        outputs = [
            "".join(d.text for d in await collect(engine, request(engine, max_tokens=24, ignore_eos=True, seed=s)))
            for s in (7, 7, 8)
        ]
    assert outputs[0] == outputs[1] != outputs[2]


async def test_a_greedy_request_answers_the_same_prompt_the_same_way_whatever_its_seed():
    async with running() as engine:
        a = await collect(engine, request(engine, max_tokens=16, temperature=0.0, seed=1))
        b = await collect(engine, request(engine, max_tokens=16, temperature=0.0, seed=2))
    assert [t for d in a for t in d.token_ids] == [t for d in b for t in d.token_ids]  # chunks may differ


async def test_without_ignore_eos_an_answer_ends_at_a_paragraph_with_eos_kept_out_of_the_text():
    async with running() as engine:
        deltas = await collect(engine, request(engine, max_tokens=2000, seed=3))
    assert deltas[-1].finish_reason == "stop"
    assert deltas[-1].token_ids[-1] == engine.tokenizer.eos_token_id
    assert deltas[-1].completion_tokens < 2000
    assert "".join(d.text for d in deltas).endswith("\n")  # the paragraph's end


async def test_min_tokens_reads_past_the_paragraph_end_where_eos_would_come():
    async with running() as engine:
        natural = await collect(engine, request(engine, max_tokens=2000, seed=3))
        n = natural[-1].completion_tokens  # ends with EOS at its paragraph's end
        longer = await collect(engine, request(engine, max_tokens=2000, seed=3, min_tokens=n + 5))
    assert natural[-1].finish_reason == longer[-1].finish_reason == "stop"
    assert longer[-1].completion_tokens > n + 5
    assert engine.tokenizer.eos_token_id not in [t for d in longer for t in d.token_ids][:-1]


async def test_min_tokens_masks_a_stop_token_id_before_it():
    async with running() as engine:
        probe = await collect(engine, request(engine, max_tokens=12, ignore_eos=True, seed=9))
        stop_id = probe[-1].token_ids[-1]  # the 12th token
        deltas = await collect(
            engine,
            request(engine, max_tokens=40, ignore_eos=True, seed=9, stop_token_ids=[stop_id], min_tokens=20),
        )
    ids = [t for d in deltas for t in d.token_ids]
    assert len(ids) >= 20 and stop_id not in ids[:20]


@pytest.mark.parametrize(
    "asked",
    [{"presence_penalty": 0.5}, {"frequency_penalty": -1.0}, {"repetition_penalty": 1.3}, {"logit_bias": {5: 9.0}}],
)
async def test_sampling_fields_that_need_logits_are_refused_by_name(asked):
    async with running() as engine:
        with pytest.raises(InvalidRequestError, match="not implemented") as err:
            await collect(engine, request(engine, max_tokens=4, **asked))
    assert err.value.param == next(iter(asked))


async def test_a_stop_string_ends_the_answer_before_it_and_frees_the_sequence():
    async with running() as engine:
        deltas = await collect(engine, request(engine, max_tokens=2000, ignore_eos=True, seed=5, stop=[" the"]))
        await asyncio.sleep(0.05)  # the freed sequence leaves at the end of the running iteration
        stats = engine.stats()
    assert deltas[-1].finish_reason == "stop"
    assert " the" not in "".join(d.text for d in deltas)
    assert (stats.running_requests, stats.kv_blocks_used, stats.registered_requests) == (0, 0, 0)


async def test_a_stop_token_id_ends_the_answer():
    async with running() as engine:
        probe = await collect(engine, request(engine, max_tokens=12, ignore_eos=True, seed=9))
        stop_id = probe[-1].token_ids[-1]
        deltas = await collect(
            engine, request(engine, max_tokens=12, ignore_eos=True, seed=9, stop_token_ids=[stop_id])
        )
    assert deltas[-1].finish_reason == "stop"
    assert deltas[-1].token_ids[-1] == stop_id


async def test_chinese_streams_clean_character_by_character():
    text = "今天天气很好，我们去公园散步吧。"
    async with running() as engine:
        engine._source = type(engine._source)(engine.tokenizer, text)  # a source of Chinese only
        deltas = await collect(engine, request(engine, max_tokens=200, seed=2))
    pieces = [d.text for d in deltas]
    assert deltas[-1].finish_reason == "stop"  # EOS at the paragraph's end, a character boundary
    assert "\ufffd" not in "".join(pieces)
    assert set("".join(pieces)) <= set(text + "\n") and "".join(pieces).endswith("。\n")


async def test_closing_the_stream_aborts_the_request_and_frees_its_slot_and_cache():
    async with running() as engine:
        stream = engine.generate(request(engine, max_tokens=5000, ignore_eos=True, seed=4))
        await anext(stream)
        assert engine.stats().running_requests == 1 and engine.stats().kv_blocks_used > 0
        await stream.aclose()
        await asyncio.sleep(0.05)
        stats = engine.stats()
    assert (stats.running_requests, stats.kv_blocks_used, stats.registered_requests) == (0, 0, 0)


async def test_cancelling_a_waiting_request_frees_it_at_once():
    async with running(profile={**FAST, "max_running_requests": 1}) as engine:
        first = engine.generate(request(engine, rid="a", max_tokens=5000, ignore_eos=True))
        await anext(first)
        waiting = asyncio.ensure_future(collect(engine, request(engine, rid="b", max_tokens=5, ignore_eos=True)))
        await asyncio.sleep(0.01)
        assert engine.stats().queued_requests == 1
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        assert engine.stats().queued_requests == 0
        await first.aclose()


async def test_stats_show_the_batch_the_queue_the_cache_and_the_pace():
    async with running(profile={**FAST, "max_running_requests": 2}) as engine:
        streams = [engine.generate(request(engine, rid=str(i), max_tokens=5000, ignore_eos=True)) for i in range(3)]
        for s in streams[:2]:
            await anext(s)
        third = asyncio.ensure_future(anext(streams[2]))
        for _ in range(20):  # a few iterations, so that the pace is measured
            await anext(streams[0])
            await anext(streams[1])
        stats = engine.stats()
        third.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await third
        for s in streams:
            await s.aclose()
    profile = PRESETS["cpu-builtin-tiny"]
    assert (stats.running_requests, stats.queued_requests, stats.max_running_requests) == (2, 1, 2)
    assert stats.queued_prompt_tokens > 0
    assert stats.kv_blocks_total == profile.kv_cache_tokens // 32
    assert 0 < stats.kv_blocks_used < stats.kv_blocks_total
    assert stats.context_tokens > 0 and stats.recent_tpot_ms > 0 and stats.tokens_per_s > 0
    assert stats.registered_requests == 3
    assert stats.context_length == 8192 and stats.healthy


async def test_a_full_queue_is_overloaded_and_a_long_request_too_long():
    async with running(profile={**FAST, "max_running_requests": 1}, max_queued_requests=0) as engine:
        first = engine.generate(request(engine, max_tokens=5000, ignore_eos=True))
        await anext(first)
        with pytest.raises(OverloadedError):
            await collect(engine, request(engine, max_tokens=5))
        await first.aclose()
        with pytest.raises(ContextTooLongError):
            await collect(engine, request(engine, max_tokens=engine.context_length))
        with pytest.raises(InvalidRequestError):
            await collect(engine, GenerationRequest(request_id="e", prompt_token_ids=[]))


async def test_shutdown_ends_open_streams_with_engine_dead():
    engine = EmulatedEngine(config())
    await engine.start()
    stream = engine.generate(request(engine, max_tokens=5000, ignore_eos=True))
    await anext(stream)
    await engine.shutdown()
    with pytest.raises(EngineDeadError):
        async for _ in stream:
            pass
    with pytest.raises(EngineDeadError):
        await engine.check_health()


async def test_a_stream_gets_its_first_token_alone_then_several_tokens_a_message_and_counts_them_all():
    # 1 ms steps and a 50 ms stream interval: after the first token, a message carries what ~50 steps made.
    async with running(coalesce={"interval_ms": 50.0}) as engine:
        deltas = await collect(engine, request(engine, max_tokens=120, ignore_eos=True, seed=3))
    assert len(deltas[0].token_ids) == 1
    assert len(deltas) < 120 // 4  # one message per interval, not one per token
    ids = [t for d in deltas for t in d.token_ids]
    assert len(ids) == 120 and [d.completion_tokens for d in deltas] == sorted(d.completion_tokens for d in deltas)
    assert "".join(d.text for d in deltas) == engine.tokenizer.decode(ids, skip_special_tokens=True)


async def test_a_request_with_a_stop_string_counts_usage_exactly_to_the_stop_whatever_the_interval():
    async with running(coalesce={"interval_ms": 50.0}) as engine:
        plain = await collect(engine, request(engine, max_tokens=60, ignore_eos=True, seed=4, rid="a"))
        text = "".join(d.text for d in plain)
        stop = text[len(text) // 2 : len(text) // 2 + 4]
        stopped = await collect(engine, request(engine, max_tokens=60, ignore_eos=True, seed=4, rid="b", stop=[stop]))
    assert "".join(d.text for d in stopped) == text[: text.index(stop)]
    assert stopped[-1].finish_reason == "stop"
    assert stopped[-1].completion_tokens == sum(len(d.token_ids) for d in stopped) < 60


async def test_an_event_loop_that_comes_back_late_is_counted_and_logged(caplog, monkeypatch):
    monkeypatch.setattr("engines.emulated.LATE_REPORT_S", 0.0)  # report every late restart
    async with running() as engine:
        stream = engine.generate(request(engine, max_tokens=50, ignore_eos=True))
        async with contextlib.aclosing(stream):
            await anext(stream)
            time.sleep(0.05)  # the loop held 50 ms: fifty 1 ms iterations late
            with caplog.at_level("WARNING", logger="engines.emulated"):
                async for _ in stream:
                    pass
    assert engine.late_restarts >= 1 and engine.late_lost_s >= 0.04
    assert any("came back over an iteration late" in r.getMessage() for r in caplog.records)


async def test_keeps_each_iteration_s_planned_duration_its_own_step():
    """What the message gap is judged against (bench overhead's step p99): one entry per iteration, the profile's
    decode step at batch 1 for a lone request's decode iterations (FAST: 1 ms)."""
    async with running() as engine:
        await collect(engine, request(engine, max_tokens=10, ignore_eos=True, seed=1))
        steps = list(engine.step_durations_s)
        assert len(steps) == engine.iterations >= 10
        assert sorted(steps)[len(steps) // 2] == pytest.approx(FAST["step_ms_at_batch_1"] / 1e3)


async def test_a_first_token_that_is_half_a_character_does_not_hold_the_text_back_an_interval():
    # Seed 36's first token is the first half of a CJK character (found by asking the engine with no interval).
    # Its message shows a client nothing, so the token that completes the character leaves at the next step,
    # not a whole interval later; from the first text on, the interval holds the rest back as usual.
    async with running(coalesce={"interval_ms": 1000}, profile={**FAST, "step_ms_at_batch_1": 20.0}) as engine:
        deltas = await collect(engine, request(engine, max_tokens=30, ignore_eos=True, seed=36))
    assert deltas[0].text == "" and deltas[0].token_ids
    assert deltas[1].text and len(deltas[1].token_ids) == 1  # the next step's token alone, with the text
    assert len(deltas) == 3 and len(deltas[2].token_ids) == 28  # the rest: 28 steps of 20 ms, within the second


def test_it_knows_how_long_its_start_takes_before_starting():
    # A serving replica posts it as it starts, so that routers count its slots from then (router.load).
    config = EmulatedEngineConfig(preset="h200-llama-3.1-8b-int4", startup_time_scale=0.1)

    assert EmulatedEngine(config).expected_startup_s == pytest.approx(PRESETS["h200-llama-3.1-8b-int4"].startup_s * 0.1)
