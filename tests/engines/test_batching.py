"""The shared continuous batch: GUARANTEED_NO_EVICT admission, chunked prefill plans, and what cancel frees."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from engines.batching import ContinuousBatch
from tests.sim.helpers import profile


@dataclass(eq=False)
class Req:
    prompt_tokens: int
    max_tokens: int = 10
    remaining_prefill: int = 0
    block_hashes: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    held_blocks: int = 0

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


def test_admission_reserves_the_whole_context_and_the_head_blocks_the_rest():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(kv_cache_tokens=300, max_running_requests=8))
    big, small = Req(200), Req(50)
    first = Req(100)
    for r in (first, big, small):
        batch.enqueue(r)
    assert batch.admit() == [first]  # 110 + 210 > 300: big waits, and small behind it too
    assert list(batch.waiting) == [big, small]
    assert batch.kv_used == 110
    assert batch.queued_prompt_tokens == 350


def test_a_request_alone_always_runs_even_when_it_exceeds_the_cache():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(kv_cache_tokens=50))
    batch.enqueue(huge := Req(100))
    assert batch.admit() == [huge]


def test_batch_slots_bound_the_running_requests():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(max_running_requests=2))
    for _ in range(3):
        batch.enqueue(Req(10))
    assert len(batch.admit()) == 2
    assert batch.running == 2 and len(batch.waiting) == 1


def test_prefill_is_chunked_to_the_token_budget_left_by_decoding_sequences():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(max_num_tokens=1000))
    a, b = Req(700), Req(700)
    batch.enqueue(a)
    batch.enqueue(b)
    batch.admit()
    iteration = batch.plan()
    assert iteration is not None
    assert [(r is a, n) for r, n in iteration.chunk] == [(True, 700), (False, 300)]
    assert iteration.duration_s == pytest.approx(1e-3 * (10.0 + 0.1 * 1000))
    assert batch.complete_prefill(iteration) == [a]
    assert (batch.decoding, batch.queued_prompt_tokens) == (1, 400)
    nxt = batch.plan()
    assert nxt is not None and nxt.chunk == [(b, 400)] and nxt.decoding == 1  # budget 999, b needs 400


def test_decode_only_iterations_take_the_step_time_of_the_batch():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile())
    assert batch.plan() is None
    for _ in range(3):
        batch.enqueue(Req(10))
    batch.admit()
    batch.complete_prefill(batch.plan())  # type: ignore[arg-type]
    iteration = batch.plan()
    assert iteration is not None and not iteration.chunk
    assert iteration.duration_s == pytest.approx(1e-3 * (10.0 + 2 * 1.0))


def test_cancel_frees_what_the_request_held_wherever_it_was():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(max_running_requests=2))
    decoding, prefilling, waiting = Req(10), Req(20), Req(30)
    batch.enqueue(decoding)
    batch.admit()
    batch.complete_prefill(batch.plan())  # type: ignore[arg-type]
    batch.enqueue(prefilling)
    batch.enqueue(waiting)
    batch.admit()
    batch.cancel(waiting, decoding=False)
    batch.cancel(prefilling, decoding=False)
    batch.cancel(decoding, decoding=True)
    assert batch.idle
    assert (batch.kv_used, batch.queued_prompt_tokens, batch.running) == (0, 0, 0)


def _shared(prompt_tokens: int, prefix: list[int], tail: int) -> Req:
    """A request whose prompt's blocks start with ``prefix`` and end with ``tail`` blocks of its own."""
    return Req(prompt_tokens, block_hashes=[*prefix, *(1000 * tail + i for i in range(tail))])


def test_a_prompt_that_starts_with_cached_blocks_prefills_only_the_rest():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(kv_cache_tokens=10_000, kv_block_tokens=32))
    first = _shared(128, [1, 2, 3], 1)
    batch.enqueue(first)
    batch.admit()
    assert first.cached_tokens == 0 and first.remaining_prefill == 128
    batch.complete_prefill(batch.plan())
    second = _shared(128, [1, 2, 3], 2)  # three blocks in common, then its own
    batch.enqueue(second)
    assert batch.queued_prompt_tokens == 128
    batch.admit()
    assert second.cached_tokens == 96 and second.remaining_prefill == 32
    assert batch.queued_prompt_tokens == 32
    assert batch.plan().prefill_tokens == 32


def test_a_fully_cached_prompt_still_prefills_its_last_token():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(kv_cache_tokens=10_000, kv_block_tokens=32))
    first = Req(64, block_hashes=[1, 2])
    batch.enqueue(first)
    batch.admit()
    batch.complete_prefill(batch.plan())
    again = Req(64, block_hashes=[1, 2])
    batch.enqueue(again)
    batch.admit()
    assert again.cached_tokens == 63 and again.remaining_prefill == 1


def test_without_block_reuse_nothing_is_cached():
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(kv_cache_tokens=10_000, block_reuse=False))
    for _ in range(2):
        r = Req(64, block_hashes=[1, 2])
        batch.enqueue(r)
        batch.admit()
        batch.complete_prefill(batch.plan())
        assert r.cached_tokens == 0
    assert batch.cache is None


def test_cached_blocks_give_way_to_the_kv_that_running_sequences_reserve():
    # 320 tokens of KV, blocks of 32: a finished 128-token prompt leaves 4 cached blocks, evicted as admissions
    # reserve the KV they live in.
    batch: ContinuousBatch[Req] = ContinuousBatch(profile(kv_cache_tokens=320, kv_block_tokens=32))
    first = Req(128, max_tokens=1, block_hashes=[1, 2, 3, 4])
    batch.enqueue(first)
    batch.admit()
    batch.complete_prefill(batch.plan())
    batch.finish(first)
    assert batch.cache is not None and len(batch.cache) == 4
    other = Req(200, max_tokens=56, block_hashes=[9, 8, 7, 6, 5, 4])  # reserves 256 of 320: room for 2 blocks
    batch.enqueue(other)
    batch.admit()
    assert len(batch.cache) == 2
    assert batch.cache.matched_blocks([1, 2, 3, 4]) == 2  # the leaves went first, the root stays
