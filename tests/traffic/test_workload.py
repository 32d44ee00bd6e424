import itertools
import random
from collections import Counter

import pytest

from traffic.trace import TraceRow
from traffic.workload import (
    HEADER_TIER,
    HEADER_TPOT,
    HEADER_TTFT,
    FixedLength,
    NormalLength,
    Slo,
    SloTier,
    UniformLength,
    WorkloadConfig,
    build_requests,
    make_prompt,
    parse_length,
    parse_tier,
    trace_requests,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("128", FixedLength(value=128)),
        ("fixed:7", FixedLength(value=7)),
        ("uniform:4:9", UniformLength(low=4, high=9)),
        ("normal:100:20", NormalLength(mean=100, std=20)),
        ("normal:100:20:50:150", NormalLength(mean=100, std=20, low=50, high=150)),
    ],
)
def test_parse_length(text, expected):
    assert parse_length(text) == expected


@pytest.mark.parametrize("text", ["", "zipf:3", "uniform:9:4", "fixed:0", "normal:1", "uniform:a:b"])
def test_parse_length_refuses(text):
    with pytest.raises(ValueError):
        parse_length(text)


def test_distributions_stay_in_bounds():
    rng = random.Random(0)
    uniform = [UniformLength(low=4, high=9).sample(rng) for _ in range(2000)]
    assert set(uniform) == set(range(4, 10))
    normal = NormalLength(mean=100, std=50, low=60, high=130)
    draws = [normal.sample(rng) for _ in range(2000)]
    assert min(draws) == 60
    assert max(draws) == 130


def test_token_id_prompts_have_exact_length_and_safe_ids():
    prompt = make_prompt(300, "token_ids", (256, 500), random.Random(1))
    assert isinstance(prompt, list)
    assert len(prompt) == 300
    assert all(256 <= t < 500 for t in prompt)


def test_text_prompts_have_one_word_per_token():
    prompt = make_prompt(40, "text", (256, 500), random.Random(1))
    assert isinstance(prompt, str)
    assert len(prompt.split()) == 40


def test_slo_headers_send_a_tier_by_name_alone():
    assert Slo(ttft_ms=500, tpot_ms=25.5).headers() == {HEADER_TTFT: "500", HEADER_TPOT: "25.5"}
    assert Slo(tier="batch", ttft_ms=500).headers() == {HEADER_TIER: "batch"}
    assert Slo().headers() == {}


def test_parse_tier():
    assert parse_tier("gold") == SloTier(name="gold", weight=1.0)
    assert parse_tier("gold:3:200:20") == SloTier(name="gold", weight=3, ttft_ms=200, tpot_ms=20)
    assert parse_tier("gold:3::20") == SloTier(name="gold", weight=3, tpot_ms=20)
    with pytest.raises(ValueError):
        parse_tier(":1")


def test_tiers_mix_by_weight_and_inherit_global_targets():
    cfg = WorkloadConfig(
        tiers=[SloTier(name="gold", weight=3, ttft_ms=200), SloTier(name="bronze", weight=1)],
        slo_ttft_ms=1000,
        slo_tpot_ms=50,
        seed=4,
    )
    specs = list(build_requests(cfg, itertools.repeat(None, 4000)))
    counts = Counter(s.slo.tier for s in specs)
    assert counts["gold"] / len(specs) == pytest.approx(0.75, abs=0.03)
    gold = next(s.slo for s in specs if s.slo.tier == "gold")
    bronze = next(s.slo for s in specs if s.slo.tier == "bronze")
    assert gold == Slo(tier="gold", ttft_ms=200, tpot_ms=50)
    assert bronze == Slo(tier="bronze", ttft_ms=1000, tpot_ms=50)


def test_build_requests_is_seeded_and_follows_send_times():
    cfg = WorkloadConfig(input_len=UniformLength(low=5, high=50), output_len=FixedLength(value=3), seed=9)
    a = list(build_requests(cfg, [0.0, 0.5, 1.0]))
    b = list(build_requests(cfg, [0.0, 0.5, 1.0]))
    assert a == b
    assert [s.send_at for s in a] == [0.0, 0.5, 1.0]
    assert [s.index for s in a] == [0, 1, 2]
    assert all(len(s.prompt) == s.prompt_tokens and s.max_tokens == 3 for s in a)
    other = list(build_requests(cfg.model_copy(update={"seed": 10}), [0.0, 0.5, 1.0]))
    assert [s.prompt for s in other] != [s.prompt for s in a]


def test_trace_requests_replay_times_lengths_and_tiers():
    cfg = WorkloadConfig(tiers=[SloTier(name="gold", ttft_ms=100)])
    rows = [TraceRow(50.0, 10, 2, "gold"), TraceRow(52.0, 20, 4, None)]
    specs = list(trace_requests(cfg, rows, speedup=2.0))
    assert [(s.send_at, s.prompt_tokens, len(s.prompt), s.max_tokens) for s in specs] == [
        (0.0, 10, 10, 2),
        (1.0, 20, 20, 4),
    ]
    assert specs[0].slo == Slo(tier="gold", ttft_ms=100)
    assert specs[1].slo == Slo()


def test_workload_config_checks():
    with pytest.raises(ValueError):
        WorkloadConfig(token_id_range=(500, 256))
    with pytest.raises(ValueError):
        WorkloadConfig(tiers=[SloTier(name="a"), SloTier(name="a")])
