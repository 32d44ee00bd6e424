"""The router's prefix index: precise from the engines' events, approximate from its own sends, and bounded."""

from __future__ import annotations

from router.prefix_index import PrefixIndex, matched_blocks
from router.replica_backlog import best_cached, prefill_ahead


def test_bisection_finds_the_longest_held_prefix():
    assert matched_blocks({1, 2, 3}, [1, 2, 3, 4, 5]) == 3
    assert matched_blocks({1, 2, 3}, [9, 8, 7]) == 0
    assert matched_blocks(set(), []) == 0
    assert matched_blocks({1, 2}, [1, 2]) == 2


def test_events_make_a_replica_precise_and_stop_the_guessing():
    index = PrefixIndex(32)
    index.note_routed("a", [1, 2, 3], now=0.0)
    assert index.cached_tokens([1, 2, 3, 4], 200, now=1.0) == {"a": 96}
    index.apply("a", stored={1}, removed=(), cleared=True)
    assert index.is_precise("a")
    assert index.cached_tokens([1, 2, 3, 4], 200, now=1.0) == {"a": 32}
    index.note_routed("a", [1, 2, 3], now=2.0)  # ignored: the engine says what it holds
    assert index.cached_tokens([1, 2, 3, 4], 200, now=2.0) == {"a": 32}
    index.apply("a", stored=(), removed={1})
    assert index.cached_tokens([1, 2, 3, 4], 200, now=2.0) == {}


def test_a_cached_prompt_still_leaves_its_last_token_to_prefill():
    index = PrefixIndex(32)
    index.apply("a", stored={1, 2}, removed=())
    assert index.cached_tokens([1, 2], 64, now=0.0) == {"a": 63}


def test_approximate_entries_expire_and_are_bounded_leaves_first():
    index = PrefixIndex(32, capacity_blocks=3, ttl_s=10.0)
    index.note_routed("a", [1, 2, 3, 4], now=0.0)
    assert index.size().approximate_blocks == 3
    assert index.cached_blocks("a", [1, 2, 3, 4], now=1.0) == 3  # the leaf went, the root stayed
    assert index.cached_blocks("a", [1, 2, 3, 4], now=11.0) == 0


def test_replicas_gone_from_the_board_drop_out():
    index = PrefixIndex(32)
    index.apply("a", stored={1}, removed=())
    index.note_routed("b", [1], now=0.0)
    index.retain({"b"})
    assert index.size().replicas == 1
    assert index.cached_tokens([1, 2], 100, now=0.0) == {"b": 32}


def test_replica_choice_trades_the_cache_against_the_queue():
    # The replica holding 4k of a 5k prompt wins while its queue is shorter than what it saves...
    assert prefill_ahead(2000, 5000, 4096) < prefill_ahead(0, 5000, 0)
    # ... and loses once its queue outgrows the saving: the prefix spreads to another replica.
    assert prefill_ahead(6000, 5000, 4096) > prefill_ahead(0, 5000, 0)
    assert best_cached({"hot": 2000, "cold": 0}, {"hot": 4096}, 5000) == 4096
    assert best_cached({"hot": 6000, "cold": 0}, {"hot": 4096}, 5000) == 0
    assert best_cached({}, {}, 5000) == 0
