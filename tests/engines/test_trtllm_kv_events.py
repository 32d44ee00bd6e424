"""TensorRT-LLM's KV cache events renamed to the router's block hashes (engines/trtllm_kv_events.py).

The events are built exactly as ``KVCacheEventSerializer.to_json_str`` writes them (``tensorrt_llm/_utils.py``):
``{"event_id", "data", "window_size"}`` plus ``attention_dp_rank`` when set; TensorRT-LLM's own block hashes are
arbitrary numbers here, as they are to the router.
"""

from __future__ import annotations

import itertools

import pytest

from engines.kv_blocks import KvEvents, block_hashes
from engines.trtllm_kv_events import TrtllmKvEventTranslator

B = 4  # tokens per block, small to keep the prompts short
WINDOW = 4096
PROMPT = list(range(100, 110))  # 2 whole blocks and a partial one of 2 tokens


class Engine:
    """Writes events as TensorRT-LLM's serializer does, numbering them as one event manager does."""

    def __init__(self, rank: int | None = None, window: int = WINDOW) -> None:
        self.ids = itertools.count()
        self.rank = rank
        self.window = window

    def event(self, data: dict, window: int | None = None) -> dict:
        event = {"event_id": next(self.ids), "data": data, "window_size": window or self.window}
        if self.rank is not None:
            event["attention_dp_rank"] = self.rank
        return event

    def created(self) -> dict:
        return self.event({"type": "created", "num_blocks_per_cache_level": [1000, 0]})

    def stored(self, parent: int | None, blocks: list[tuple[int, list[int]]], window: int | None = None) -> dict:
        return self.event(
            {
                "type": "stored",
                "parent_hash": parent,
                "blocks": [
                    {
                        "type": "stored_block",
                        "block_hash": trt_hash,
                        "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0} for t in tokens],
                        "cache_level": 0,
                        "priority": 35,
                    }
                    for trt_hash, tokens in blocks
                ],
            },
            window,
        )

    def removed(self, *trt_hashes: int, window: int | None = None) -> dict:
        return self.event({"type": "removed", "block_hashes": list(trt_hashes)}, window)

    def updated(self, trt_hash: int) -> dict:
        diff = {"type": "event_diff", "new_value": 1, "old_value": 0}
        return self.event({"type": "updated", "block_hash": trt_hash, "cache_level": diff, "priority": diff})


def chunks(tokens: list[int]) -> list[list[int]]:
    return [tokens[i : i + B] for i in range(0, len(tokens), B)]


def prompt_stored(engine: Engine, tokens: list[int], first_trt_hash: int = 9000) -> dict:
    """The blocks of ``tokens`` stored from the root, as TensorRT-LLM stores a finished context."""
    return engine.stored(None, [(first_trt_hash + i, block) for i, block in enumerate(chunks(tokens))])


def test_stored_blocks_get_the_routers_chained_hashes():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([engine.created(), prompt_stored(engine, PROMPT)])
    batch = kv.drain()
    assert batch.cleared  # a new cache
    assert batch.stored == set(block_hashes(PROMPT, B))  # the partial third block is not a prompt block
    assert len(kv) == 2
    assert not kv.drain()  # drained


def test_a_child_event_is_named_through_its_parents_entry():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    first, second = PROMPT[:4], PROMPT[4:8]
    kv.feed([engine.stored(None, [(11, first)]), engine.stored(11, [(12, second)])])
    assert kv.drain().stored == set(block_hashes(first + second, B))


def test_removed_blocks_come_back_out_and_are_forgotten():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([prompt_stored(engine, PROMPT)])
    kv.drain()
    kv.feed([engine.removed(9001, 9002)])  # the second block and the partial one
    batch = kv.drain()
    assert batch.removed == {block_hashes(PROMPT, B)[1]} and not batch.stored
    assert len(kv) == 1
    kv.feed([engine.removed(9001)])  # again: nothing is known of it any more
    assert not kv.drain()


def test_a_block_stored_and_removed_within_one_batch_comes_out_removed():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.drain()
    kv.feed([prompt_stored(engine, PROMPT), engine.removed(9000, 9001)])
    assert kv.drain() == KvEvents(removed=set(block_hashes(PROMPT, B)))  # removed wins, as applied in order


def test_created_clears_the_cache():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([prompt_stored(engine, PROMPT)])
    kv.drain()
    kv.feed([engine.created()])
    batch = kv.drain()
    assert batch.cleared and not batch.stored and len(kv) == 0


def test_updated_events_change_nothing():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([prompt_stored(engine, PROMPT)])
    kv.drain()
    kv.feed([engine.updated(9000)])
    assert not kv.drain() and len(kv) == 2


def test_a_partial_block_ends_the_chain_and_its_removal_is_ignored():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([engine.stored(None, [(1, PROMPT[:4]), (2, PROMPT[4:6])]), engine.removed(2)])
    batch = kv.drain()
    assert batch.stored == {block_hashes(PROMPT, B)[0]} and not batch.removed


def test_a_stored_event_with_an_unknown_parent_is_skipped():
    """Hashing it from the root would claim a prefix the engine does not hold."""
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([engine.stored(777, [(12, PROMPT[4:8])])])
    assert not kv.drain().stored and kv.skipped_orphans == 1
    assert block_hashes(PROMPT[4:8], B)[0] not in kv


def test_only_the_largest_attention_window_counts():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([engine.stored(None, [(1, PROMPT[:4])], window=512)])  # before the larger window is known
    assert kv.drain().stored == {block_hashes(PROMPT, B)[0]}
    kv.feed([engine.stored(None, [(2, PROMPT[4:8])], window=WINDOW)])  # the global layers' window
    batch = kv.drain()
    assert batch.removed == {block_hashes(PROMPT, B)[0]}  # the sliding window's block is given up
    assert batch.stored == {block_hashes(PROMPT[4:8], B)[0]}
    kv.feed([engine.stored(None, [(3, PROMPT[:4])], window=512)])
    assert not kv.drain()  # a smaller window's events are dropped


def test_events_without_a_window_size_all_count():
    """Older builds send no window_size."""
    kv = TrtllmKvEventTranslator(B)
    event = Engine().stored(None, [(1, PROMPT[:4])])
    del event["window_size"]
    kv.feed([event])
    assert kv.drain().stored == {block_hashes(PROMPT, B)[0]}


def test_lost_events_give_up_that_ranks_blocks():
    """The event buffer discards its oldest events when full: a missed 'removed' would leave a block forever."""
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    kv.feed([prompt_stored(engine, PROMPT)])
    kv.drain()
    next(engine.ids)  # an event TensorRT-LLM discarded
    kv.feed([engine.updated(9000)])
    batch = kv.drain()
    assert batch.removed == set(block_hashes(PROMPT, B)) and len(kv) == 0
    assert kv.lost_event_gaps == 1


def test_attention_dp_ranks_keep_their_own_blocks():
    rank0, rank1, kv = Engine(rank=0), Engine(rank=1), TrtllmKvEventTranslator(B)
    first = block_hashes(PROMPT, B)[0]
    # The same tokens on both ranks, with the same TensorRT-LLM hash: each rank's copy counts.
    kv.feed([rank0.stored(None, [(1, PROMPT[:4])]), rank1.stored(None, [(1, PROMPT[:4])])])
    assert kv.drain().stored == {first}
    kv.feed([rank0.removed(1)])
    assert not kv.drain() and first in kv  # rank 1 still holds it
    kv.feed([rank1.removed(1)])
    assert kv.drain().removed == {first}


def test_a_rank_whose_events_were_lost_keeps_the_others():
    rank0, rank1, kv = Engine(rank=0), Engine(rank=1), TrtllmKvEventTranslator(B)
    kv.feed([rank0.stored(None, [(1, PROMPT[:4])]), rank1.stored(None, [(2, PROMPT[4:8])])])
    kv.drain()
    next(rank1.ids)
    kv.feed([rank1.updated(2)])
    assert kv.drain().removed == {block_hashes(PROMPT[4:8], B)[0]}
    assert block_hashes(PROMPT, B)[0] in kv


def test_multimodal_tokens_end_the_chain():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    event = prompt_stored(engine, PROMPT[:8])
    event["data"]["blocks"][1]["tokens"][0]["token_extra_id"] = 5  # an image's placeholder
    kv.feed([event])
    assert kv.drain().stored == {block_hashes(PROMPT, B)[0]}


def test_none_events_of_a_build_without_an_event_manager_are_ignored():
    kv = TrtllmKvEventTranslator(B)
    kv.drain()
    kv.feed([None, {}, {"event_id": 0, "data": None}])
    assert not kv.drain()


def test_blocks_of_another_size_are_warned_about_once(caplog):
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    long = list(range(2 * B))
    kv.feed([engine.stored(None, [(1, long)]), engine.stored(None, [(2, long)])])
    assert not kv.drain().stored
    assert sum("tokens per block" in r.message for r in caplog.records) == 1


def test_memory_holds_only_what_the_engine_holds():
    engine, kv = Engine(), TrtllmKvEventTranslator(B)
    for n in range(100):
        tokens = [n * 1000 + t for t in range(2 * B)]
        kv.feed([prompt_stored(engine, tokens, first_trt_hash=n * 10), engine.removed(n * 10, n * 10 + 1)])
    assert len(kv) == 0 and not kv._blocks


def test_block_size_must_be_positive():
    with pytest.raises(ValueError):
        TrtllmKvEventTranslator(0)
