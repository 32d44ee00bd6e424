"""Prefix workloads: shared system prompts and conversations, the same for the bench and the simulator."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from router import RouterConfig
from sim.workload import Stream, sim_requests, stream_items
from traffic.arrivals import ConstantArrivals, PoissonArrivals, arrival_times
from traffic.ideal_cache import ideal_prefix_hits
from traffic.prefix import Conversations, SharedPrefix
from traffic.segments import segment_block_hashes, segment_token_ids
from traffic.workload import FixedLength, SloTier, UniformLength, WorkloadConfig, build_requests

SHARED = WorkloadConfig(
    input_len=UniformLength(low=20, high=200),
    output_len=UniformLength(low=4, high=40),
    prefix=SharedPrefix(groups=4, prefix_tokens=512),
    tiers=[SloTier(name="interactive", weight=2), SloTier(name="batch")],
    seed=3,
)
CHAT = SHARED.model_copy(update={"prefix": Conversations(conversations=3, turns=4)})


def _take(cfg: WorkloadConfig, n: int):
    return list(itertools.islice(build_requests(cfg, itertools.repeat(None)), n))


def test_shared_prefix_requests_start_with_their_groups_prefix():
    specs = _take(SHARED, 200)
    prefixes = Counter(s.segments[0] for s in specs)
    assert len(prefixes) == 4 and all(n == 512 for _, n in prefixes)
    assert len({s.segments[1][0] for s in specs}) == 200  # every question its own
    for s in specs:
        assert len(s.segments) == 2 and s.turn == 0
        assert s.prompt_tokens == 512 + s.segments[1][1] == len(s.prompt)
        assert 20 <= s.segments[1][1] <= 200
    same_group = [s for s in specs if s.segments[0] == specs[0].segments[0]]
    assert all(s.prompt[:512] == specs[0].prompt[:512] for s in same_group)
    assert all(256 <= t < 500 for s in specs for t in s.prompt)


def test_zipf_groups_are_hot_at_the_front():
    cfg = SHARED.model_copy(update={"prefix": SharedPrefix(groups=10, prefix_tokens=64, zipf=1.2)})
    counts = Counter(s.segments[0] for s in _take(cfg, 3000))
    ranked = [n for _, n in counts.most_common()]
    assert len(ranked) == 10 and ranked[0] > 4 * ranked[-1]
    # The hottest group's share is 1 / sum(k ** -1.2 for k in 1..10) ~ 0.405.
    assert 0.37 < ranked[0] / 3000 < 0.44


def test_the_same_seed_gives_the_same_requests_and_another_seed_others():
    assert _take(SHARED, 50) == _take(SHARED, 50)
    other = _take(SHARED.model_copy(update={"seed": 4}), 50)
    assert {s.segments[0] for s in other}.isdisjoint({s.segments[0] for s in _take(SHARED, 50)})


def test_content_seed_shares_prefixes_across_workloads():
    a = SHARED.model_copy(update={"prefix": SharedPrefix(groups=2, prefix_tokens=64, content_seed=7)})
    b = a.model_copy(update={"seed": 99})
    assert {s.segments[0] for s in _take(a, 40)} == {s.segments[0] for s in _take(b, 40)}
    assert {s.segments[1] for s in _take(a, 40)}.isdisjoint({s.segments[1] for s in _take(b, 40)})


def test_a_conversation_sends_its_whole_history_then_is_replaced():
    cfg = CHAT.model_copy(update={"input_len": FixedLength(value=10), "output_len": FixedLength(value=5)})
    specs = _take(cfg, 3 * 4 * 2)
    # Round robin over 3 conversations: request i continues conversation i % 3, turn (i // 3) % 4.
    assert [s.turn for s in specs] == [(i // 3) % 4 for i in range(24)]
    for i, s in enumerate(specs):
        assert s.prompt_tokens == s.turn * 15 + 10 == len(s.prompt)
        if s.turn:
            earlier = specs[i - 3]
            # The earlier turn's prompt, then its answer, then one new user message.
            assert s.segments[: len(earlier.segments)] == earlier.segments
            assert len(s.segments) == len(earlier.segments) + 2 and s.segments[-2][1] == 5
            assert s.prompt[: earlier.prompt_tokens] == earlier.prompt
    firsts = [s.segments[0] for s in specs if s.turn == 0]
    assert len(firsts) == len(set(firsts)) == 6  # each new conversation opens with a message of its own


def test_random_picks_spread_conversations_out_of_step():
    cfg = CHAT.model_copy(update={"prefix": Conversations(conversations=5, turns=3, pick="random")})
    specs = _take(cfg, 300)
    turns = Counter(s.turn for s in specs)
    assert set(turns) == {0, 1, 2}
    # A conversation's turns are its history growing: each later turn extends an earlier request's prompt.
    by_prefix = {s.segments: s for s in specs}
    for s in specs:
        if s.turn:
            assert s.segments[:-2] in by_prefix
            assert by_prefix[s.segments[:-2]].turn == s.turn - 1


def test_a_conversations_answers_have_its_earlier_turns_output_length():
    specs = _take(CHAT, 30)
    for i, s in enumerate(specs):
        if s.turn:
            assert s.segments[-2][1] == specs[i - 3].max_tokens


def test_later_turns_are_cacheable_first_turns_are_not():
    cfg = CHAT.model_copy(update={"prefix": Conversations(conversations=4, turns=5)})
    specs = _take(cfg, 200)
    hits = ideal_prefix_hits(segment_block_hashes(s.segments, 16) for s in specs)
    assert all(h == 0 for s, h in zip(specs, hits.per_request, strict=True) if s.turn == 0)
    later = [(s, h) for s, h in zip(specs, hits.per_request, strict=True) if s.turn > 0]
    # A later turn reuses the whole blocks of its previous turn's prompt, not the answer after it (no prompt had it).
    assert all(h == (s.prompt_tokens - s.segments[-1][1] - s.segments[-2][1]) // 16 for s, h in later)


def test_text_prompts_are_refused_with_a_prefix():
    with pytest.raises(ValueError, match="token_ids"):
        WorkloadConfig(prompt_mode="text", prefix=SharedPrefix(groups=1, prefix_tokens=8))


def test_the_prefix_kind_parses_from_a_dict():
    cfg = WorkloadConfig.model_validate({"prefix": {"kind": "conversations", "conversations": 2, "turns": 3}})
    assert cfg.prefix == Conversations(conversations=2, turns=3)


def test_without_a_prefix_nothing_changes():
    specs = _take(SHARED.model_copy(update={"prefix": None}), 20)
    assert all(s.segments == () and s.turn == 0 and len(s.prompt) == s.prompt_tokens for s in specs)


@pytest.mark.parametrize(
    "cfg", [SHARED, CHAT, CHAT.model_copy(update={"prefix": None})], ids=["shared", "chat", "none"]
)
def test_the_simulator_sees_the_benchs_requests(cfg):
    spec = PoissonArrivals(rate=10.0)
    bench = list(itertools.islice(build_requests(cfg, arrival_times(spec, cfg.seed)), 150))
    sim = list(itertools.islice(stream_items(Stream(name="s", arrivals=spec, workload=cfg), 1e9), 150))
    assert [(b.send_at, b.prompt_tokens, b.max_tokens, b.slo, b.segments, b.turn) for b in bench] == sim
    assert all(segment_token_ids(b.segments, cfg.token_id_range) == b.prompt for b in bench if b.segments)


def test_simulated_requests_carry_segments_and_turns():
    requests = list(
        sim_requests([Stream(name="s", arrivals=ConstantArrivals(rate=5.0), workload=CHAT)], 10.0, RouterConfig())
    )
    assert len(requests) == 50
    assert [r.turn for r in requests[:6]] == [0, 0, 0, 1, 1, 1]
    assert all(r.prompt_tokens == sum(n for _, n in r.segments) == r.features.prompt_tokens for r in requests)


def test_the_mean_prompt_counts_the_prefix_or_the_history_it_resends():
    from traffic.prefix import mean_prompt_tokens

    assert mean_prompt_tokens(None, 500, 100) == 500
    assert mean_prompt_tokens(SharedPrefix(groups=4, prefix_tokens=4096), 400, 100) == 4496
    # Turns 0..3 resend 0, 1, 2, 3 earlier (message, answer) pairs: 1.5 on average.
    assert mean_prompt_tokens(Conversations(conversations=2, turns=4), 200, 100) == 200 + 1.5 * 300
