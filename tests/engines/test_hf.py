"""engines.hf: the embedded transformers engine, on a real builtin model with real continuous batching."""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest

from core.errors import (
    ContextTooLongError,
    EngineConfigError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
)
from engines.config import HFEngineConfig
from engines.engine_core import STATS_INTERVAL_S
from engines.hf import HFEngine
from engines.kv_blocks import block_hashes
from engines.protocol import GenerationRequest, SamplingParams


@pytest.fixture(scope="module")
async def engine():
    eng = HFEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=2, max_running_requests=16))
    await eng.start()
    yield eng
    await eng.shutdown()


def _request(ids, rid="r", **sampling) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    return GenerationRequest(rid, list(ids), SamplingParams(**sampling))


async def _collect(engine, request):
    deltas = [d async for d in engine.generate(request)]
    return deltas, "".join(d.text for d in deltas), [t for d in deltas for t in d.token_ids]


async def _wait_idle(engine) -> None:
    for _ in range(200):  # polls until the engine thread has processed cancellations; bounded
        s = engine.stats()
        if s.running_requests == 0 and s.queued_requests == 0 and engine.registered_requests() == 0:
            return
        await asyncio.sleep(0.05)
    s = engine.stats()
    raise AssertionError(f"engine not idle: {s}, registered={engine.registered_requests()}")


async def test_greedy_output_equals_model_generate(engine):
    import torch

    for text in ["The river runs", "今天早上", "def add("]:
        prompt = engine.tokenizer.encode(text)
        deltas, _, ids = await _collect(engine, _request(prompt, max_tokens=24))
        with torch.no_grad():
            ref = engine.model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0]
        ref = ref[len(prompt) :].tolist()
        eos = engine.tokenizer.eos_token_id
        if eos in ref:  # generate pads after EOS; the engine stops at it
            ref = ref[: ref.index(eos) + 1]
        assert ids == ref, text
        assert deltas[-1].finish_reason == ("stop" if ref[-1] == eos else "length")
        assert deltas[-1].completion_tokens == len(ref)
        assert deltas[0].first_token_time is not None


async def test_sixteen_concurrent_streams_complete_with_their_lengths(engine):
    prompt = engine.tokenizer.encode("Hello")
    lengths = [8 + i for i in range(16)]
    results = await asyncio.gather(
        *[
            _collect(engine, _request(prompt, rid=f"c{i}", max_tokens=n, ignore_eos=True, temperature=0.8))
            for i, n in enumerate(lengths)
        ]
    )
    for (deltas, _, ids), n in zip(results, lengths, strict=True):
        assert len(ids) == n
        assert deltas[-1].finish_reason == "length"
    await _wait_idle(engine)


async def test_cancelled_stream_frees_its_slot(engine):
    prompt = engine.tokenizer.encode("Once")
    stream = engine.generate(_request(prompt, rid="cancel-me", max_tokens=900, ignore_eos=True))
    got = 0
    async for delta in stream:
        got += len(delta.token_ids)
        if got >= 3:
            break
    await asyncio.sleep(2 * STATS_INTERVAL_S)  # a fresh report from the engine child (see _stats_midway)
    assert engine.stats().running_requests + engine.stats().queued_requests >= 1
    await stream.aclose()
    await _wait_idle(engine)


async def test_task_cancellation_aborts_the_request(engine):
    prompt = engine.tokenizer.encode("Once")
    started = asyncio.Event()

    async def consume():
        async for _ in engine.generate(_request(prompt, rid="task", max_tokens=900, ignore_eos=True)):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), timeout=60)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await _wait_idle(engine)


async def test_stop_string_ends_the_stream_and_never_leaks(engine):
    prompt = engine.tokenizer.encode("The")
    _, free_text, _ = await _collect(engine, _request(prompt, max_tokens=48, ignore_eos=True))
    assert len(free_text) > 6
    stop = free_text[3:6]  # a string the greedy output is known to contain
    deltas, text, _ = await _collect(engine, _request(prompt, max_tokens=48, ignore_eos=True, stop=[stop]))
    assert deltas[-1].finish_reason == "stop"
    assert stop not in text
    assert free_text.startswith(text)
    await _wait_idle(engine)


async def test_chinese_and_emoji_stream_without_replacement_characters(engine):
    for prompt_text in ["今天天气很好，我们", "我喜欢", "Party time 🎉"]:
        prompt = engine.tokenizer.encode(prompt_text)
        deltas, text, ids = await _collect(engine, _request(prompt, max_tokens=40, ignore_eos=True))
        full = engine.tokenizer.decode(ids, skip_special_tokens=True)
        assert text == full  # streaming pieces add up to the one-shot decode
        if "\ufffd" not in full:  # the model emitted valid UTF-8: no piece may carry a broken character
            assert all("\ufffd" not in d.text for d in deltas)


async def test_bad_input_raises_our_errors_naming_the_problem(engine):
    with pytest.raises(InvalidRequestError, match="empty"):
        await _collect(engine, _request([], max_tokens=4))
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        await _collect(engine, _request([5, 6], max_tokens=0))
    too_long = [300] * (engine.context_length + 1)
    with pytest.raises(ContextTooLongError, match="context length"):
        await _collect(engine, _request(too_long, max_tokens=4))
    with pytest.raises(ContextTooLongError):
        await _collect(engine, _request([300] * 10, max_tokens=engine.context_length))
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        await _collect(engine, _request([10**9], max_tokens=4))
    await _wait_idle(engine)


@pytest.mark.parametrize(
    "asked",
    [
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"repetition_penalty": 1.2},
        {"min_tokens": 2},
        {"logit_bias": {5: -100.0}},
        {"seed": 3, "temperature": 0.8},  # one seed for the whole batch loop: a request's own cannot be honoured
    ],
)
async def test_sampling_fields_continuous_batching_cannot_apply_per_request_are_refused_by_name(engine, asked):
    # transformers 5.24's per-request processors take temperature, top_p and top_k only (cb_logits_processors.py).
    with pytest.raises(InvalidRequestError, match="not implemented") as err:
        await _collect(engine, _request([5, 6], max_tokens=4, **asked))
    assert err.value.param == next(iter(asked))
    await _wait_idle(engine)


async def test_unknown_builtin_name_is_refused():
    eng = HFEngine(HFEngineConfig(model="builtin:no-such-model", device="cpu"))
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        await eng.start()


async def test_stats_report_the_pace_the_running_sequences_decoded_at(engine):
    await _collect(engine, _request(engine.tokenizer.encode("The river"), max_tokens=16, ignore_eos=True))
    stats = engine.stats()
    assert stats.recent_tpot_ms > 0.0  # 15 tokens after the first, each timed from the one before
    assert stats.recent_decode_batch > 0.0
    assert stats.tokens_per_s > 0.0
    await _wait_idle(engine)


async def _stats_midway(engine, prompt, *, after_tokens: int):
    """The engine's stats while a stream of ``prompt`` runs, taken after it has yielded ``after_tokens`` tokens; the
    stream is then closed and the engine left idle.

    The engine child pushes its stats every ``STATS_INTERVAL_S``, so a report read the moment the tokens arrive may
    predate the request (CI's faster cores saw ``running_requests=0``): wait two intervals, and ask for far more
    tokens than that can generate, so the request is still running when the fresh report is taken."""
    stream = engine.generate(_request(prompt, max_tokens=900, ignore_eos=True))
    async with contextlib.aclosing(stream):
        seen = 0
        async for delta in stream:
            seen += len(delta.token_ids)
            if seen >= after_tokens:
                break
        await asyncio.sleep(2 * STATS_INTERVAL_S)
        stats = engine.stats()
    await _wait_idle(engine)
    assert stats.running_requests == 1, f"the request was not running when its stats were read: {stats}"
    return stats


async def test_stats_report_the_context_the_running_sequences_hold(engine):
    prompt = engine.tokenizer.encode("The river runs through the old town and under the bridge")
    stats = await _stats_midway(engine, prompt, after_tokens=8)
    # The prompt and the tokens generated so far sit in the KV cache (a step may run ahead of the stream).
    assert stats.context_tokens >= len(prompt) + 7
    assert engine.stats().context_tokens == 0


async def test_kv_blocks_count_what_running_requests_hold_not_the_prefix_cache(engine):
    # A finished request's complete blocks stay in transformers' prefix cache, evicted when a request needs them:
    # counted as used they held the autoscaler's kv signal up after the load had gone.
    prompt = engine.tokenizer.encode("A long walk along the river")
    stats = await _stats_midway(engine, prompt, after_tokens=100)
    assert stats.kv_blocks_used >= 100 // engine.config.page_size  # a step may run ahead
    for n in range(3):
        await _collect(engine, _request(prompt, rid=f"kv-{n}", max_tokens=80, ignore_eos=True))
    await _wait_idle(engine)
    assert engine.stats().kv_blocks_used == 0


async def test_stats_report_kv_blocks_and_limits(engine):
    stats = engine.stats()
    assert stats.kv_blocks_total > 0
    assert 0 <= stats.kv_blocks_used <= stats.kv_blocks_total
    assert stats.context_length == engine.context_length
    assert stats.healthy
    await engine.check_health()


async def test_an_engine_reports_its_limits_as_soon_as_start_returns():
    """No request has run yet: the batch loop's KV cache must already be counted (the router and the autoscaler
    read these figures the moment a replica is ready)."""
    eng = HFEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1, max_running_requests=8))
    await eng.start()
    try:
        stats = eng.stats()
        assert stats.kv_blocks_total > 0
        assert stats.kv_blocks_used == 0
        assert stats.max_running_requests == 8
        assert stats.context_length == eng.context_length > 0
        assert stats.healthy
    finally:
        await eng.shutdown()


async def test_a_kv_cache_that_cannot_be_built_fails_start_with_a_config_error():
    eng = HFEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1, num_blocks=10**12))
    with pytest.raises(EngineConfigError, match="KV cache"):
        await eng.start()
    with pytest.raises(EngineDeadError):
        await eng.check_health()


async def test_a_hung_batch_loop_fails_the_health_check():
    eng = HFEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1, hang_timeout_s=0.2))
    await eng.start()
    try:
        await eng.check_health()
        prompt = eng.tokenizer.encode("Hello")
        with eng._manager.pause():  # the loop stops between steps, as a hung engine would
            consumer = asyncio.create_task(_collect(eng, _request(prompt, rid="hung2", max_tokens=5)))
            for _ in range(100):  # bounded: wait until the engine has the requests queued
                if eng.stats().queued_requests or eng.stats().running_requests:
                    break
                await asyncio.sleep(0.05)
            await eng.check_health()  # first sight of pending work starts the clock
            await asyncio.sleep(0.5)
            with pytest.raises(EngineDeadError, match="no progress"):
                await eng.check_health()
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
    finally:
        await eng.shutdown()


def _random_prompt(engine, n: int, seed: int) -> list[int]:
    """Token ids no other test sends (the module's engine keeps every test's blocks in its prefix cache)."""
    rnd = random.Random(seed)
    return [rnd.randrange(10, engine.tokenizer.vocab_size) for _ in range(n)]


def _reused(prompt_tokens: int, page: int) -> int:
    # transformers takes whole hashed blocks, never the one holding the prompt's last token
    # (PagedAttentionCache.search_prefix_match, CacheAllocator.match_prefix_blocks)
    return (prompt_tokens - 1) // page * page


async def test_a_repeated_prefix_is_taken_from_the_cache_and_reported_as_cached_tokens(engine):
    page = engine.kv_block_tokens
    assert page == engine.config.page_size
    prompt = _random_prompt(engine, 200, seed=1)
    before = engine.stats()
    first, _, ids = await _collect(engine, _request(prompt, rid="pc-1", max_tokens=6, ignore_eos=True))
    again, _, again_ids = await _collect(engine, _request(prompt, rid="pc-2", max_tokens=6, ignore_eos=True))
    branch = prompt[:100] + _random_prompt(engine, 60, seed=2)
    branched, _, _ = await _collect(engine, _request(branch, rid="pc-3", max_tokens=6, ignore_eos=True))
    assert [d.cached_tokens for d in first] == [0] * len(first)
    assert again[0].cached_tokens == again[-1].cached_tokens == _reused(200, page) == 192
    assert again_ids == ids  # greedy: the cached blocks hold what a fresh prefill would have computed
    assert branched[0].cached_tokens == 100 // page * page
    after = engine.stats()
    assert after.cache_hit_tokens - before.cache_hit_tokens == 192 + 96
    assert after.cache_prompt_tokens - before.cache_prompt_tokens == 200 + 200 + 160
    assert after.cached_blocks >= 200 // page


async def test_kv_events_name_the_blocks_the_engine_cached_as_the_router_hashes_them(engine):
    await _wait_idle(engine)
    engine.kv_events()  # whatever the earlier tests left
    page = engine.kv_block_tokens
    prompt = _random_prompt(engine, 200, seed=3)
    _, _, ids = await _collect(engine, _request(prompt, rid="ev-1", max_tokens=40, ignore_eos=True))
    await _wait_idle(engine)
    events = engine.kv_events()
    assert events is not None and not events.cleared and not events.removed
    # Every whole block in the cache: the prompt's and those generated tokens filled (the last token is never
    # forwarded, so it is in no block).
    assert events.stored == set(block_hashes(prompt + ids[:-1], page))
    assert len(events.stored) == (200 + 39) // page
    assert not engine.kv_events()  # drained


async def test_kv_events_report_the_blocks_memory_pressure_evicts():
    eng = HFEngine(
        HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1, max_running_requests=1, num_blocks=64)
    )
    await eng.start()
    try:
        page = eng.kv_block_tokens
        first = eng.kv_events()
        assert first is not None and first.cleared and not first.stored  # a new cache: readers start from empty
        a = _random_prompt(eng, 600, seed=4)
        # max_tokens 2: transformers hashes no block of a step that finishes its request (PagedAttentionCache.
        # mark_complete_blocks), so a one-token request would leave its last prefill chunk unhashed
        await _collect(eng, _request(a, rid="ev-a", max_tokens=2, ignore_eos=True))
        await _wait_idle(eng)
        stored = eng.kv_events()
        assert stored is not None and stored.stored == set(block_hashes(a, page))
        b = _random_prompt(eng, 600, seed=5)  # does not fit beside a's cached blocks: transformers evicts them
        deltas, _, _ = await _collect(eng, _request(b, rid="ev-b", max_tokens=2, ignore_eos=True))
        assert deltas[0].cached_tokens == 0
        await _wait_idle(eng)
        events = eng.kv_events()
        assert events is not None
        assert events.removed == set(block_hashes(a, page))
        assert events.stored == set(block_hashes(b, page))
        assert eng.stats().cached_blocks == len(events.stored)
    finally:
        await eng.shutdown()


async def test_an_engine_without_prefix_sharing_tells_nothing_of_its_cache(engine, monkeypatch):
    from engines import hf

    eng = hf.HFEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1, max_running_requests=1))
    # As transformers does for models with sliding-window layers (PagedAttentionCache.use_prefix_sharing)
    monkeypatch.setattr(hf.HFEngine, "_watch_prefix_cache", lambda self: None)
    await eng.start()
    try:
        assert eng.kv_block_tokens is None and eng.kv_events() is None
        deltas, _, _ = await _collect(eng, _request(engine.tokenizer.encode("Hello"), max_tokens=2))
        assert all(d.cached_tokens is None for d in deltas)
        assert eng.stats().cached_blocks == 0
    finally:
        await eng.shutdown()
