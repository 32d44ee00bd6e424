"""serve_app.routing: variant views from the stats board, in-flight bookkeeping, and latency feedback."""

from __future__ import annotations

import dataclasses
import time

import pytest
import yaml

from engines.protocol import EngineStats
from router import SLO, Reason, RequestFeatures
from serve_app.config import load_app_config
from serve_app.routing import RoutingTable
from serve_app.stats_board import STALE_AFTER_S, ReplicaReport, StatsBoard
from tests.conftest import REPO


def _replica(name: str, **overrides) -> ReplicaReport:
    """A board entry as an engine replica posts it."""
    stats = EngineStats(kv_blocks_used=10, kv_blocks_total=100, context_length=1024, max_running_requests=16)
    return ReplicaReport(name, 0.0, dataclasses.replace(stats, **overrides))


@pytest.fixture
def table() -> RoutingTable:
    args = yaml.safe_load((REPO / "serve_config.yaml").read_text())["applications"][0]["args"]
    return RoutingTable(load_app_config(args), snapshot=None)  # type: ignore[arg-type]


def test_without_reports_every_variant_has_no_ready_replica(table):
    assert not table.has_live_stats()
    assert all(v.ready_replicas == 0 for v in table.views())


def test_views_sum_replica_loads_and_take_the_smallest_limits(table):
    table._snapshot = {
        "tiny": [
            _replica("a", running_requests=3, queued_requests=1, queued_prompt_tokens=40, kv_blocks_used=50),
            _replica("b", running_requests=2, context_length=512),
        ]
    }
    view = next(v for v in table.views() if v.name == "tiny")
    assert view.ready_replicas == 2
    assert view.running_requests == 5
    assert view.queued_requests == 1
    assert view.queued_prompt_tokens == 40
    assert view.context_length == 512
    assert view.kv_used_fraction == pytest.approx(0.5)
    assert table.context_lengths() == {"tiny": 512}


def test_views_carry_the_engines_decode_pace(table):
    table._snapshot = {
        "tiny": [
            _replica("a", running_requests=6, recent_tpot_ms=100.0, recent_decode_batch=6.0),
            _replica("b", running_requests=2, recent_tpot_ms=200.0, recent_decode_batch=2.0),
        ]
    }
    view = next(v for v in table.views() if v.name == "tiny")
    assert (view.recent_tpot_ms, view.recent_decode_batch) == pytest.approx((125.0, 8.0))


def test_inflight_counts_open_and_close_once(table):
    table._snapshot = {"tiny": [_replica("a")]}
    ticket = table.open("tiny", 30, None)
    view = next(v for v in table.views() if v.name == "tiny")
    assert (view.inflight, view.inflight_prompt_tokens) == (1, 30)
    table.book.close(ticket, 5, time.monotonic(), ok=True)
    table.book.close(ticket, 5, time.monotonic(), ok=True)  # a second close must not double-count
    view = next(v for v in table.views() if v.name == "tiny")
    assert (view.inflight, view.inflight_prompt_tokens) == (0, 0)


def _routed(table, max_tokens: int):
    """Both variants reporting, one 20-token request routed: (its variant, its prediction, TPOT at batch 1)."""
    table._snapshot = {"tiny": [_replica("a")], "small": [_replica("b", context_length=4096)]}
    decision = table.decide(RequestFeatures(prompt_tokens=20, max_tokens=max_tokens))
    assert decision.variant is not None
    return (
        decision.variant,
        decision.predictions[decision.variant],
        table._models[decision.variant].predict_tpot_ms(1.0),
    )


def test_finished_requests_train_the_variants_latency_model(table):
    variant, prediction, before = _routed(table, max_tokens=8)
    for _ in range(50):
        ticket = table.open(variant, 20, prediction)
        # TTFT 10 ms, then 9 more tokens over 9 s: a very slow 1000 ms per output token.
        now = time.monotonic()
        ticket.start, ticket.first_token_at = now - 9.010, now - 9.0
        table.book.close(ticket, 10, time.monotonic(), ok=True)
    after = table._models[variant].predict_tpot_ms(1.0)
    assert after > before  # the model moved toward what it observed


def test_a_long_answer_trains_tpot_midway_before_it_ends(table):
    variant, prediction, before = _routed(table, max_tokens=256)
    for _ in range(50):
        ticket = table.open(variant, 20, prediction, max_tokens=256)
        # 16 tokens in 15 s, 240 still to come: the checkpoint teaches a slow 1000 ms per output token now.
        now = time.monotonic()
        ticket.start, ticket.first_token_at = now - 15.010, now - 15.0
        table.book.progress(ticket, 8, time.monotonic())  # before the checkpoint: nothing
        table.book.progress(ticket, 16, time.monotonic())
    after = table._models[variant].predict_tpot_ms(1.0)
    assert after > before  # learned with every answer still open


def test_a_burst_on_variants_with_no_profile_is_never_shed_before_their_models_learn(table):
    # The default config's variants have no latency_profile: their models start from pessimistic defaults,
    # which predict seconds of waiting for a slot once a burst fills the batch. A first version of shedding
    # acted on those and refused 54 of a 384-request burst on an H200 whose TTFT was in fact 0.3 s.
    table._snapshot = {"tiny": [_replica("a")], "small": [_replica("b", context_length=4096)]}
    interactive = RequestFeatures(prompt_tokens=100, max_tokens=64, slo=SLO(ttft_ms=300.0, tpot_ms=50.0))
    reasons = []
    for _ in range(96):  # all in flight at once, none finished
        decision = table.decide(interactive)
        reasons.append(decision.reason)
        if decision.variant is not None:
            table.open(decision.variant, 100, decision.predictions[decision.variant], max_tokens=64)
    assert Reason.SHED_HOPELESS not in reasons
    assert Reason.DEGRADED_SMALLEST_VIOLATION in reasons  # the burst did make the defaults predict misses


def test_failed_requests_do_not_train(table):
    table._snapshot = {"tiny": [_replica("a")]}
    decision = table.decide(RequestFeatures(prompt_tokens=20, max_tokens=8))
    model = table._models[decision.variant]
    before = model.profile()
    ticket = table.open(decision.variant, 20, decision.predictions[decision.variant])
    table.book.close(ticket, 0, time.monotonic(), ok=False)
    assert model.profile() == before


async def test_a_variant_without_a_ready_replica_is_starting_not_gone(table):
    snapshots = [
        {"tiny": [_replica("a")], "small": [_replica("b", context_length=4096)]},
        # small's only replica restarts: it reports no context length until its engine is up
        {"tiny": [_replica("a")], "small": [_replica("c", context_length=0, max_running_requests=0)]},
    ]

    async def snapshot():
        return snapshots.pop(0)

    table._snapshot_fn = snapshot
    await table.refresh()
    await table.refresh()
    assert "small" not in table._snapshot
    small = next(v for v in table.views() if v.name == "small")
    assert (small.ready_replicas, small.starting_replicas, small.context_length) == (0, 1, 4096)
    long_prompt = RequestFeatures(prompt_tokens=2000, max_tokens=8)  # only small's context holds it
    # Waiting for the starting replica is allowed by default: the request goes there, its TTFT carrying startup.
    decision = table.decide(long_prompt)
    assert decision.variant == "small"
    assert decision.predictions["small"].ttft_ms >= table.config.router.replica_startup_ms
    # Without waiting, the answer is "unavailable, retry" (503), not "too long" (400).
    table.config = table.config.model_copy(
        update={"router": table.config.router.model_copy(update={"wait_for_starting_replicas": False})}
    )
    decision = table.decide(long_prompt)
    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_UNAVAILABLE)
    assert table.decide(RequestFeatures(prompt_tokens=20, max_tokens=8)).variant == "tiny"


async def test_replicas_starting_beside_ready_ones_count_from_when_they_said_they_would_serve(table):
    starting = dict(context_length=0, max_running_requests=0, starting_ready_in_s=5.0)
    snapshot = {
        "tiny": [
            _replica("a", running_requests=16),
            ReplicaReport("b", 1.0, dataclasses.replace(_replica("b").stats, **starting)),  # posted 1 s ago
            ReplicaReport("c", 3.0, dataclasses.replace(_replica("c").stats, **starting)),
            _replica("d", context_length=0, max_running_requests=0),  # starting, no estimate: not counted
        ]
    }

    async def board():
        return snapshot

    table._snapshot_fn = board
    await table.refresh()
    tiny = next(v for v in table.views() if v.name == "tiny")
    assert (tiny.ready_replicas, tiny.starting_replicas) == (1, 2)
    assert tiny.starting_ready_in_ms == pytest.approx(4000.0, abs=50.0)  # the later of the two: b's, 4 s from now


async def test_the_board_keeps_a_starting_replicas_single_post_until_it_is_due():
    board = StatsBoard.func_or_class()
    await board.post("tiny", "a", EngineStats(starting_ready_in_s=60.0))
    await board.post("tiny", "b", EngineStats())
    board._entries = {key: (posted - STALE_AFTER_S - 1.0, stats) for key, (posted, stats) in board._entries.items()}

    assert [r.replica for r in (await board.snapshot())["tiny"]] == ["a"]


def test_ticket_headers_and_unstarted_prompts_show_in_the_views(table):
    table._snapshot = {"tiny": [_replica("a")]}
    decision = table.decide(RequestFeatures(prompt_tokens=20, max_tokens=8))
    ticket = table.open("tiny", 20, decision.predictions["tiny"], max_tokens=8)
    assert set(ticket.headers()) == {"x-route-predicted-ttft-ms", "x-route-predicted-tpot-ms"}
    view = next(v for v in table.views() if v.name == "tiny")
    assert (view.unstarted_requests, view.unstarted_prompt_tokens) == (1, 20)
    table.book.first_token(ticket, time.monotonic())
    view = next(v for v in table.views() if v.name == "tiny")
    assert (view.unstarted_requests, view.unstarted_prompt_tokens) == (0, 0)


def test_a_timeout_without_a_first_token_teaches_the_time_waited(table):
    table._snapshot = {"tiny": [_replica("a")]}
    decision = table.decide(RequestFeatures(prompt_tokens=20, max_tokens=8))
    model = table._models["tiny"]
    prediction = decision.predictions["tiny"]
    for _ in range(20):
        ticket = table.open("tiny", 20, prediction, max_tokens=8)
        ticket.start = time.monotonic() - 60.0  # waited a minute, then timed out
        table.book.close(ticket, 0, time.monotonic(), ok=False)
    assert table.decide(RequestFeatures(prompt_tokens=20, max_tokens=8)).predictions["tiny"].ttft_ms > 10 * (
        prediction.ttft_ms
    )
    assert model.ttft_margin_for(20) > 0


def _mixed_table() -> RoutingTable:
    args = {
        "model_name": "mixed",
        "default_variant": "hf-tiny",
        "variants": [
            {"name": "hf-tiny", "engine": {"backend": "hf", "model": "builtin:tiny", "device": "cpu"}},
            {"name": "emulated-tiny", "engine": {"backend": "emulated", "preset": "cpu-builtin-tiny"}},
        ],
    }
    return RoutingTable(load_app_config(args), snapshot=None)  # type: ignore[arg-type]


def test_views_carry_the_sampling_fields_each_backend_implements():
    views = {v.name: v for v in _mixed_table().views()}
    assert views["hf-tiny"].sampling_fields is not None and "min_tokens" not in views["hf-tiny"].sampling_fields
    assert views["emulated-tiny"].sampling_fields is not None and "min_tokens" in views["emulated-tiny"].sampling_fields


def test_without_reports_the_fallback_is_the_default_variant_unless_it_lacks_a_field():
    table = _mixed_table()
    plain = table.fallback(RequestFeatures(prompt_tokens=5, max_tokens=5))
    assert (plain.variant, plain.reason) == ("hf-tiny", Reason.NO_LIVE_STATS)
    asking = table.fallback(RequestFeatures(prompt_tokens=5, max_tokens=5, sampling_fields=frozenset({"min_tokens"})))
    assert asking.variant == "emulated-tiny"


def test_without_reports_a_field_no_variant_or_not_the_pinned_one_implements_is_a_400_naming_it():
    table = _mixed_table()
    nowhere = table.fallback(RequestFeatures(prompt_tokens=5, max_tokens=5, sampling_fields=frozenset({"logit_bias"})))
    assert (nowhere.variant, nowhere.reason, nowhere.param) == (
        None,
        Reason.REJECTED_UNSUPPORTED_FIELD,
        "logit_bias",
    )
    pinned = table.fallback(
        RequestFeatures(prompt_tokens=5, max_tokens=5, pinned="hf-tiny", sampling_fields=frozenset({"min_tokens"}))
    )
    assert (pinned.variant, pinned.param) == (None, "min_tokens")
    assert "'hf-tiny'" in pinned.detail


async def test_requests_spilled_from_a_full_variant_are_published_as_its_redirected_demand():
    from bench.spike_fleet import FLEET, app_args  # an 8B + 70B fleet with the presets' latency, objective cost

    config = load_app_config(app_args(FLEET, "engine_load"))
    cheap, other = (v.name for v in config.variants)
    published: list[tuple[str, dict[str, float]]] = []

    async def publish(source: str, levels: dict[str, float]) -> None:
        published.append((source, levels))

    async def snapshot() -> dict[str, list[ReplicaReport]]:
        full = _replica(
            "a",
            running_requests=2,
            queued_requests=40,
            queued_prompt_tokens=40 * 4000,
            context_length=32768,
            max_running_requests=2,
        )
        return {cheap: [full], other: [_replica("b", context_length=32768)]}

    table = RoutingTable(config, snapshot, publish)
    await table.refresh()
    features = RequestFeatures(prompt_tokens=200, max_tokens=200, slo=SLO(ttft_ms=1000, tpot_ms=50))
    decision = table.decide(features)
    await table.refresh()

    assert decision.variant == other
    assert published and published[-1][1] == {cheap: 1.0}


async def test_a_variant_at_zero_replicas_that_requests_prefer_gets_one_wake_up_call_at_a_time():
    import asyncio

    from bench.spike_fleet import FLEET, app_args

    config = load_app_config(app_args(FLEET, "engine_load"))
    cheap, other = (v.name for v in config.variants)
    woken: list[str] = []
    answer = asyncio.Event()

    async def wake(variant: str) -> None:
        woken.append(variant)
        await answer.wait()  # Serve answers once a replica runs

    async def snapshot() -> dict[str, list[ReplicaReport]]:
        return {other: [_replica("b", context_length=32768)]}  # the cheap variant has no replica

    table = RoutingTable(config, snapshot, wake=wake)
    await table.refresh()
    features = RequestFeatures(prompt_tokens=200, max_tokens=200, slo=SLO(ttft_ms=1000, tpot_ms=50))
    decisions = [table.decide(features) for _ in range(3)]
    await asyncio.sleep(0.01)

    assert {d.variant for d in decisions} == {other}  # rerouted: none waits for the cold start
    assert woken == [cheap]  # one call, however many requests preferred it
    answer.set()
    await asyncio.sleep(0.01)
    table.decide(features)
    await asyncio.sleep(0.01)
    assert woken == [cheap, cheap]  # still at zero after the answer: the next redirected request wakes it again


async def test_a_refresh_hands_each_replicas_unprefilled_prompt_tokens_to_the_request_routers(table):
    from serve_app import replica_router

    async def snapshot():
        return {"tiny": [ReplicaReport("a", 2.0, EngineStats(queued_prompt_tokens=700, context_length=1024))]}

    table._snapshot_fn = snapshot
    try:
        before = time.monotonic()
        await table.refresh()
        tokens, measured_at = replica_router.CHOICE_STATE.reports["a"]
        assert tokens == 700
        assert before - 2.0 <= measured_at <= time.monotonic() - 2.0  # dated by the report's age, on this clock
    finally:
        replica_router.CHOICE_STATE.note_reports({})


def _emulated_table(kv_changes, index_size=None) -> RoutingTable:
    """A table over the emulated H200 fleet (its engines reuse and report prompt blocks), two 8B replicas."""
    args = yaml.safe_load((REPO / "configs" / "emulated-h200.yaml").read_text())["applications"][0]["args"]
    big = dataclasses.replace(_replica("x"), replica="x").stats
    snapshot = {
        "llama-8b-int4": [_replica("a", context_length=32768), _replica("b", context_length=32768)],
        "llama-70b-fp8": [ReplicaReport("c", 0.0, dataclasses.replace(big, context_length=32768))],
    }

    async def board_snapshot():
        return snapshot

    return RoutingTable(load_app_config(args), snapshot=board_snapshot, kv_changes=kv_changes, index_size=index_size)


async def test_the_prefix_index_follows_the_engines_reports_and_the_prediction_leaves_the_cache_out():
    from engines.kv_blocks import KvEvents, block_hashes

    prompt = list(range(300, 300 + 4096 + 100))
    held = set(block_hashes(prompt[:4096], 32))
    reads: list[dict[str, int]] = []

    async def kv_changes(cursors):
        reads.append(dict(cursors))
        return {"a": (1, KvEvents(stored=held, cleared=True))} if not cursors else {}

    table = _emulated_table(kv_changes)
    await table.refresh()
    await table.refresh()
    assert reads == [{}, {"a": 1}]  # the second read asks only for what changed since
    lookup = table.prefix_lookup(prompt)
    assert lookup.cached == {"llama-8b-int4": {"a": 4096}}
    assert lookup.best == {"llama-8b-int4": 4096}  # both replicas idle: the one holding it
    features = RequestFeatures(prompt_tokens=len(prompt), max_tokens=16)
    with_cache = table.decide(features, lookup).predictions["llama-8b-int4"]
    without = table.decide(features).predictions["llama-8b-int4"]
    assert with_cache.cached_tokens == 4096 and without.cached_tokens == 0
    assert with_cache.ttft_ms < without.ttft_ms


async def test_a_replica_gone_from_the_board_leaves_the_index():
    from engines.kv_blocks import KvEvents, block_hashes

    prompt = list(range(300, 300 + 256))

    async def kv_changes(cursors):
        return {"a": (1, KvEvents(stored=set(block_hashes(prompt, 32)), cleared=True))}

    sizes = []
    table = _emulated_table(kv_changes, index_size=lambda variant, size: sizes.append((variant, size.blocks)))
    await table.refresh()
    assert table.prefix_lookup(prompt).cached
    assert ("llama-8b-int4", 8) in sizes  # each variant's size, told to the metrics after each refresh
    table._snapshot_fn = _empty_board
    await table.refresh()
    assert not table.prefix_lookup(prompt).cached
    assert sizes[-2:] == [("llama-8b-int4", 0), ("llama-70b-fp8", 0)]


async def _empty_board():
    return {}


def test_variants_index_their_engines_prefix_blocks_at_the_engines_block_size(table):
    # The default config's hf engines: transformers' continuous batching shares page_size (16-token) blocks.
    assert {name: index.block_tokens for name, index in table.prefix.items()} == {"tiny": 16, "small": 16}


def test_an_engine_that_reports_nothing_is_indexed_from_what_was_sent(table):
    table._snapshot = {"tiny": [_replica("a")], "small": [_replica("b", context_length=4096)]}
    prompt = list(range(300, 400))
    assert table.prefix_lookup(prompt).cached == {}
    table.note_routed("tiny", "a", table.prefix_lookup(prompt))
    assert table.prefix_lookup(prompt).cached == {"tiny": {"a": 96}}


async def test_the_index_follows_the_block_size_the_engines_report():
    from engines.kv_blocks import KvEvents, block_hashes

    prompt = list(range(300, 300 + 256))
    cursors_seen: list[dict[str, int]] = []

    async def kv_changes(cursors):
        cursors_seen.append(dict(cursors))
        return {"a": (3, KvEvents(stored=set(block_hashes(prompt, 64)), cleared=True))}

    table = _emulated_table(kv_changes)
    await table.refresh()
    assert table.prefix["llama-8b-int4"].block_tokens == 32
    reports = await table._snapshot_fn()
    for r in reports["llama-8b-int4"]:
        r.stats.kv_block_tokens = 64  # a prebuilt engine's build says 64
    await table.refresh()
    assert table.prefix["llama-8b-int4"].block_tokens == 64
    assert cursors_seen[-1] == {}  # the whole cache again, at the new size
    assert table.prefix_lookup(prompt).cached == {"llama-8b-int4": {"a": 255}}


async def test_an_affinity_key_sends_a_continuation_where_its_last_prompt_went_before_any_report():
    from engines.kv_blocks import KvEvents

    async def empty_caches(cursors):  # both engines report: precise, and nothing cached yet
        return {r: (1, KvEvents(cleared=True)) for r in ("a", "b") if r not in cursors}

    table = _emulated_table(empty_caches)
    await table.refresh()
    first = list(range(300, 300 + 1000))
    lookup = table.prefix_lookup(first, "chat-1")
    assert lookup.cached == {}
    table.note_routed("llama-8b-int4", "b", lookup, "chat-1")
    later = [*first, *range(500, 700)]  # the next turn resends the history
    assert table.prefix_lookup(later, "chat-1").cached == {"llama-8b-int4": {"b": 992}}
    assert table.prefix_lookup(later, "chat-2").cached == {}  # another key, no claim
    other = [1, *first[1:], *range(500, 700)]  # not a continuation of that prompt: no claim either
    assert table.prefix_lookup(other, "chat-1").cached == {}
