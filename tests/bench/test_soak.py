"""The soak bench: its pure parts (cancellation marks, outcome counts, engine states, problems, report),
the replica RSS reader on real processes, and a short soak against the real default app."""

from __future__ import annotations

import asyncio
import subprocess
import time

import httpx
import pytest

from bench.soak import (
    MISSING_DONE,
    EngineState,
    Outcomes,
    SoakConfig,
    SoakResult,
    engine_states,
    find_problems,
    get_variants,
    interleave_index,
    outcomes,
    registered_total,
    render_report,
    replica_rss,
    rss_rows,
    settle,
    soak,
    split_concurrency,
    with_cancellations,
)
from traffic.records import RequestRecord
from traffic.workload import FixedLength, UniformLength, WorkloadConfig, build_requests


def _specs(n: int, max_tokens: int = 40):
    workload = WorkloadConfig(input_len=FixedLength(value=4), output_len=FixedLength(value=max_tokens))
    return list(build_requests(workload, [None] * n))


def _record(*, done=True, cancelled=False, status=200, error=None, variant="tiny") -> RequestRecord:
    return RequestRecord(
        request_id="r",
        index=0,
        start_time=0.0,
        start_s=0.0,
        arrival_s=None,
        prompt_tokens=4,
        max_tokens=8,
        status=status,
        error_type=error,
        done=done,
        cancelled=cancelled,
        variant=variant,
    )


def _state(registered=0, running=0, queued=0, variant="tiny") -> EngineState:
    return EngineState(variant=variant, replica="r1", running=running, queued=queued, registered=registered)


def test_cancellation_marks_are_seeded_and_fall_in_the_first_half_of_the_stream():
    marked = list(with_cancellations(_specs(2000), 0.3, seed=7))
    points = [s.cancel_after_chunks for s in marked if s.cancel_after_chunks is not None]
    assert 0.25 < len(points) / len(marked) < 0.35
    assert min(points) == 1 and max(points) == 20  # randint(1, 40 // 2)
    assert marked == list(with_cancellations(_specs(2000), 0.3, seed=7))
    assert marked != list(with_cancellations(_specs(2000), 0.3, seed=8))
    assert [s.prompt for s in marked] == [s.prompt for s in _specs(2000)]  # only the mark differs


def test_cancellation_fraction_bounds_and_one_token_streams():
    assert all(s.cancel_after_chunks is None for s in with_cancellations(_specs(50), 0.0, seed=0))
    assert all(s.cancel_after_chunks == 1 for s in with_cancellations(_specs(50, max_tokens=1), 1.0, seed=0))


def test_concurrency_is_split_evenly_over_the_loops():
    assert split_concurrency(8, 3) == [3, 3, 2]
    assert split_concurrency(2, 3) == [1, 1, 0]
    assert split_concurrency(8, 1) == [8]


def test_interleaved_indices_of_several_loops_never_collide():
    indices = [s.index for loop in range(3) for s in interleave_index(_specs(10), loop, 3)]
    assert sorted(indices) == list(range(30))


def test_outcomes_count_cancellations_apart_from_failures():
    records = [
        _record(),
        _record(variant="small"),
        _record(done=False, cancelled=True),
        _record(status=429, error="rate_limit_error", done=False, variant=None),
        _record(error="engine_unavailable", done=False),  # an error event inside a 200 stream
        _record(done=False),  # stopped without [DONE] or an error
        _record(status=None, error="timeout", done=False),
    ]
    o = outcomes(records)
    assert (o.requests, o.completed, o.cancelled, o.failed, o.missing_done) == (7, 2, 1, 4, 1)
    assert o.errors_by_status == {"200": 2, "429": 1, "none": 1}
    assert o.errors_by_type == {MISSING_DONE: 1, "engine_unavailable": 1, "rate_limit_error": 1, "timeout": 1}
    assert o.by_variant == {"small": 1, "tiny": 5}


def test_engine_states_come_from_each_replicas_stats_in_the_variants_answer():
    payload = {
        "variants": [
            {
                "name": "tiny",
                "replica_stats": [
                    {"replica": "a", "running_requests": 1, "queued_requests": 0, "registered_requests": 2},
                    {"replica": "b", "running_requests": 0, "queued_requests": 0},  # an engine that cannot say
                    {"replica": "c"},  # malformed: skipped
                ],
            },
            {"name": "small", "replica_stats": []},
            "junk",
        ]
    }
    states = engine_states(payload)
    assert [(s.variant, s.replica, s.running, s.registered) for s in states] == [
        ("tiny", "a", 1, 2),
        ("tiny", "b", 0, -1),
    ]
    assert not states[0].idle
    assert engine_states({"detail": "Not Found"}) == []
    assert engine_states(None) == []


def test_registered_total_is_unknown_without_engines_or_when_one_cannot_say():
    assert registered_total([_state(0), _state(3)]) == 3
    assert registered_total([_state(0)]) == 0
    assert registered_total([_state(0), _state(-1)]) is None
    assert registered_total([]) is None


def _outcomes(requests=10, failed=0, missing_done=0) -> Outcomes:
    return Outcomes(
        requests=requests,
        completed=requests - failed,
        cancelled=0,
        failed=failed,
        missing_done=missing_done,
        errors_by_status={},
        errors_by_type={},
        by_variant={"tiny": requests},
    )


def test_problems_name_leaks_busy_engines_failures_and_unknowns():
    assert find_problems(_outcomes(), [_state(0), _state(0, variant="small")], 0) == []
    assert find_problems(_outcomes(), [_state(2)], 0) == ["2 engine requests still registered after the load ended"]
    assert find_problems(_outcomes(), [_state(0, running=1)], 0) == [
        "1 engine replicas still running or queueing requests after the load ended"
    ]
    assert find_problems(_outcomes(), [_state(-1, variant="trt")], 0) == [
        "engines of trt do not report registered requests"
    ]
    assert find_problems(_outcomes(), [], 0) == ["no engine replica reported its stats"]
    assert find_problems(_outcomes(requests=0), [_state()], 0) == ["no stream was sent"]
    assert find_problems(_outcomes(failed=3, missing_done=1), [_state()], 2) == [
        "3 streams that were not cancelled failed (1 without [DONE])",
        "2 warm-up streams failed",
    ]


def test_rss_rows_pair_processes_seen_at_either_end():
    rows = rss_rows({"Ingress pid 1": 10, "variant-tiny pid 2": 20}, {"Ingress pid 1": 15, "variant-tiny pid 3": 30})
    assert rows == [("Ingress pid 1", 10, 15), ("variant-tiny pid 2", 20, None), ("variant-tiny pid 3", None, 30)]


def test_replica_rss_finds_ingress_and_engine_processes_by_their_ray_names():
    # Ray renames a replica's worker "ray::ServeReplica:<app>:<deployment>"; argv[0] does the same here.
    names = [
        "ray::ServeReplica:soak:Ingress",
        "ray::ServeReplica:soak:variant-tiny",
        "ray::ServeReplica:soak:StatsBoard",
    ]
    children = [subprocess.Popen([name, "30"], executable="sleep") for name in names]
    try:
        wanted = {f"Ingress pid {children[0].pid}", f"variant-tiny pid {children[1].pid}"}
        deadline = time.monotonic() + 10
        while not wanted <= set(found := replica_rss()) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the children have exec'd
        assert wanted <= set(found)
        assert not any(key.startswith("StatsBoard") for key in found)
        assert all(rss > 0 for rss in found.values())
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_the_report_shows_verdict_streams_memory_and_engines():
    result = SoakResult(
        command="python -m bench soak --quick",
        date="2026-11-30T00:00:00+00:00",
        url="http://127.0.0.1:1",
        config=SoakConfig(duration_s=60, input_len=UniformLength(low=1, high=2)),
        load_s=60.5,
        warmup_failed=0,
        outcomes=_outcomes(failed=1),
        rss_start={"Ingress pid 1": 100 << 20},
        rss_end={"Ingress pid 1": 150 << 20},
        engines=[_state(2)],
        registered_requests=2,
        problems=["2 engine requests still registered after the load ended"],
    )
    text = render_report(result)
    assert "**FAILED**" in text
    assert "  * 2 engine requests still registered after the load ended" in text
    assert "| Ingress pid 1 | 100.0 | 150.0 | +50.0 |" in text
    assert "| tiny | r1 | 0 | 0 | 2 |" in text
    assert "| failed | 1 |" in text
    assert "| served by tiny | 10 |" in text
    assert "prompt tokens uniform 1..2, max_tokens uniform 16..128" in text
    assert "registered requests: 2" in text


async def test_settle_gives_up_at_its_deadline_and_returns_what_it_saw():
    def busy(request: httpx.Request) -> httpx.Response:
        stats = {"replica": "a", "running_requests": 1, "queued_requests": 0, "registered_requests": 1}
        return httpx.Response(200, json={"variants": [{"name": "tiny", "replica_stats": [stats]}]})

    async with httpx.AsyncClient(transport=httpx.MockTransport(busy)) as client:
        states = await settle(client, "http://127.0.0.1:1", timeout_s=0.2, interval_s=0.05)
    assert [(s.replica, s.registered) for s in states] == [("a", 1)]


@pytest.mark.serve
async def test_a_short_soak_with_cancellations_leaves_nothing_registered(llm_url, default_app_args):
    config = SoakConfig(
        duration_s=15,
        concurrency=4,
        cancel_fraction=0.5,
        input_len=UniformLength(low=8, high=64),
        output_len=UniformLength(low=8, high=48),
        settle_timeout_s=60,
    )
    # Beside the soak, the most requests any engine held at once: a count that never rose would make the
    # final zero meaningless.
    peak = 0
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        async with httpx.AsyncClient() as client:
            while not stop.is_set():
                states = engine_states(await get_variants(client, llm_url))
                peak = max([peak, *(s.registered for s in states)])
                await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())
    try:
        result, records = await soak(llm_url, default_app_args["model_name"], config, progress=False)
    finally:
        stop.set()
        await watcher
    assert peak > 0
    assert result.problems == []
    assert result.registered_requests == 0
    assert result.outcomes.failed == 0
    assert result.outcomes.cancelled > 0  # cancellations really happened, so the abort path was exercised
    assert result.outcomes.completed > 0
    assert set(result.outcomes.by_variant) == {v["name"] for v in default_app_args["variants"]}  # every engine soaked
    assert all(r.done for r in records if not r.cancelled)
    assert any(key.startswith("Ingress pid") for key in result.rss_end)
    assert any(key.startswith("variant-tiny pid") for key in result.rss_end)
