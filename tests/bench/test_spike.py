"""The spike bench's pure parts: the fleet it deploys, replica-seconds, the per-mode report, start-up times."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from bench.replicas import ReplicaSample, ReplicaStart, parse_replica_starts
from bench.spike import (
    cluster_cpus,
    start_fit,
    startup_concurrency,
    trace_starts,
    warm_pool_env,
)
from bench.spike_fleet import FLEET, MODES, SHAPES, app_args
from bench.spike_report import mode_report, replica_seconds, sim_gap, stream_cut
from serve_app.config import load_app_config
from traffic.records import RequestRecord

SMALL, BIG = (v.name for v in FLEET.variants)


def _sample(t: float, n: int, variant: str = SMALL) -> ReplicaSample:
    return ReplicaSample(t_s=t, variant=variant, replicas=n)


def _record(
    start_s: float, *, status: int = 200, error: str | None = None, slo_met: bool = True, variant: str = SMALL
) -> RequestRecord:
    return RequestRecord(
        request_id="r",
        index=0,
        start_time=0.0,
        start_s=start_s,
        arrival_s=start_s,
        prompt_tokens=1,
        max_tokens=1,
        status=status,
        error_type=error,
        slo_met=slo_met,
        variant=variant if status == 200 else None,
        ttft_s=0.1 if status == 200 else None,
    )


def test_replica_seconds_integrate_a_step_function_over_the_window():
    samples = [_sample(1.0, 1), _sample(10.0, 3), _sample(20.0, 1)]

    # 1 replica over [0, 10) (the first count holds before the first sample), 3 over [10, 20), 1 over [20, 30).
    assert replica_seconds(samples, 0.0, 30.0) == pytest.approx(10 + 30 + 10)
    assert replica_seconds(samples, 15.0, 25.0) == pytest.approx(5 * 3 + 5 * 1)
    assert replica_seconds([], 0.0, 30.0) == 0.0


def test_a_stream_is_cut_only_when_it_was_accepted_and_failed():
    assert stream_cut(_record(0, error="internal_error"))
    assert not stream_cut(_record(0))
    assert not stream_cut(_record(0, status=429, error="rate_limit_error"))


def test_the_report_scores_the_peak_windows_counts_rejections_cuts_and_spill_and_weighs_gpus():
    records = [
        _record(5.0),
        _record(15.0, slo_met=False),
        _record(20.0, status=429, error="rate_limit_error", slo_met=False),
        _record(25.0, variant=BIG),
        _record(45.0, error="internal_error", slo_met=False),
        _record(50.0),
    ]
    samples = [_sample(0.0, 1), _sample(20.0, 3), _sample(45.0, 1), _sample(0.0, 1, BIG)]

    report = mode_report("engine_load", "serve", records, samples, FLEET, [(10.0, 40.0)], 60.0)

    assert report.during.slo_attainment == pytest.approx(1 / 3)  # 15 s missed, 20 s rejected, 25 s met
    assert report.outside.slo_attainment == pytest.approx(2 / 3)
    assert (report.rejected, report.streams_cut, report.other_failures) == (1, 1, 0)
    assert report.variants[SMALL].peak_replicas == 3 and report.variants[SMALL].served_during == 1
    assert report.variants[BIG].served_during == 1  # the spill-over
    small = 20 * 1 + 25 * 3 + 15 * 1
    assert report.variants[SMALL].replica_seconds == pytest.approx(small)
    assert report.gpu_seconds == pytest.approx(small + 60 * 4)  # the 70B replica holds 4 GPUs
    fixed = sum(v.max_replicas for v in FLEET.variants) * 60.0
    assert report.replica_ratio == pytest.approx((small + 60) / fixed)


def test_the_simulated_gap_is_in_points():
    real = mode_report("engine_load", "serve", [_record(15.0), _record(16.0, slo_met=False)], [], FLEET, [(10, 40)], 60)
    sim = mode_report("engine_load", "sim", [_record(15.0), _record(16.0)], [], FLEET, [(10, 40)], 60)

    assert sim_gap(real, sim)["attainment_during_points"] == pytest.approx(50.0)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_deploys_a_valid_app_of_the_whole_fleet(mode):
    config = load_app_config(app_args(FLEET, mode))

    assert [v.name for v in config.variants] == [SMALL, BIG]
    for variant, spec in zip(config.variants, FLEET.variants, strict=True):
        engine = variant.engine
        assert engine.backend == "emulated"
        assert engine.engine_profile().max_running_requests == spec.max_running_requests  # type: ignore[union-attr]
        assert engine.startup_time_scale == FLEET.startup_time_scale  # type: ignore[union-attr]
        if mode == "fixed":
            assert variant.autoscaling is None and variant.num_replicas == spec.max_replicas
        else:
            assert variant.autoscaling is not None and variant.autoscaling.policy == mode
            assert variant.autoscaling.ttft_target_ms == FLEET.slo_ttft_ms


def test_every_shape_has_peak_windows_inside_its_trace():
    for shape in SHAPES.values():
        assert shape.peak_windows() and all(0 <= a < b for a, b in shape.peak_windows())


LOG = [
    "INFO 2026-12-01 20:38:17,563 controller 24917 -- Replica(id='7smznabv', deployment='variant-llama-8b-int4', "
    "app='spike') started successfully on node 'abc' after 23.4s (PID: 25197). Replica constructor, reconfigure "
    "method, and initial health check took 16.2s.",
    "INFO 2026-12-01 20:38:43,992 controller 24917 -- Upscaling Deployment(...) from 1 to 2 replicas.",
    "INFO 2026-12-01 20:39:22,942 controller 24917 -- Replica(id='a7ql9yae', deployment='variant-llama-8b-int4', "
    "app='spike') started successfully on node 'abc' after 38.8s (PID: 26763).",
]


def test_replica_starts_are_read_from_serves_controller_log():
    starts = parse_replica_starts(LOG)

    assert [(s.deployment, s.total_s, s.init_s) for s in starts] == [
        ("variant-llama-8b-int4", 23.4, 16.2),
        ("variant-llama-8b-int4", 38.8, None),
    ]
    assert starts[1].wall_time - starts[0].wall_time == pytest.approx(65.379)


def test_a_modes_starts_are_on_its_traces_clock_and_only_its_variants_count():
    began = 1000.0
    starts = [
        ReplicaStart(began + 20.0, "spike", f"variant-{SMALL}", 8.0, 6.0),  # decided at 12 s, 2 s beyond init
        ReplicaStart(began + 30.0, "spike", f"variant-{BIG}", 25.0, 18.0),
        ReplicaStart(began + 30.0, "spike", "Ingress", 5.0, 3.0),  # not a variant
        ReplicaStart(began + 31.0, "spike", f"variant-{SMALL}", 9.0, None),  # no constructor time: no overhead
        ReplicaStart(began - 5.0, "spike", f"variant-{SMALL}", 8.0, 6.0),  # the deploy, before the trace
        ReplicaStart(began + 500.0, "spike", f"variant-{SMALL}", 8.0, 6.0),  # the next mode's
    ]

    rows = trace_starts(starts, began, duration_s=150.0)

    assert rows == [
        {"variant": SMALL, "decided_s": 12.0, "total_s": 8.0, "overhead_s": 2.0},
        {"variant": BIG, "decided_s": 5.0, "total_s": 25.0, "overhead_s": 7.0},
    ]


def test_the_start_queue_is_fitted_to_the_starts_inside_the_peak_windows():
    from sim.replica_starts import ProcessStarts

    truth = ProcessStarts(2, 3.0, 1.0)
    rows = [{"variant": SMALL, "decided_s": 20.0, "overhead_s": truth.process_ready_s(20.0) - 20.0} for _ in range(5)]
    quiet = [{"variant": SMALL, "decided_s": 100.0, "overhead_s": 0.5}]  # outside the window: left out

    fit = start_fit({"engine_load": rows + quiet, "ongoing_requests": rows}, [(15.0, 75.0)], concurrency=2)

    assert fit is not None
    assert (fit.process_s, fit.after_s) == pytest.approx((3.0, 1.0))
    assert start_fit({"engine_load": quiet}, [(15.0, 75.0)], concurrency=2) is None


def test_a_rescore_joins_modes_recorded_in_separate_runs_and_fits_the_start_queue(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from bench.__main__ import main

    recorded = Path(__file__).parent / "data" / "spike-step"  # a real step run's records, kept as test data
    out = tmp_path / "step"
    for mode in MODES:
        shutil.copytree(recorded / mode, out / mode)
    shutil.copy(recorded / "spike.json", out / "spike.json")
    (out / "engine_load" / "command.txt").write_text("python -m bench spike --mode engine_load (run A)\n")

    assert main(["spike", "--rescore", "--shape", "step", "--scale-ahead-s", "20", "--out", str(tmp_path)]) == 0

    report = (out / "report.md").read_text()
    assert "`python -m bench spike --mode engine_load (run A)` (engine_load)" in report
    assert "rescored with `python -m bench spike --rescore" in report
    queue = json.loads((out / "spike.json").read_text())["start_queue"]
    assert queue is not None and queue["concurrency"] >= 1 and queue["process_s"] + queue["after_s"] > 0
    assert "worker processes at a time" in report


def test_a_warm_pool_prestarts_one_worker_per_cpu_all_at_once_with_the_app_imported():
    env = warm_pool_env(24)
    assert env["RAY_worker_maximum_startup_concurrency"] == "24"
    # Ray skips a preload module it cannot import (a log line in the worker's log): each must import. The last
    # freezes the importing process's heap (tests/serve_app/test_preload_gc.py runs it in a process of its own).
    *imports, freeze = env["RAY_preload_python_modules"].split(",")
    for name in imports:
        importlib.import_module(name)
    assert freeze == "serve_app.preload_gc" and importlib.util.find_spec(freeze) is not None
    assert cluster_cpus(8, 24) == 24  # the raylet prestarts one worker per logical CPU
    assert startup_concurrency(8, 24) == 24  # the simulator's start queue then runs as many at once
    assert warm_pool_env(0) == {}
    assert cluster_cpus(8, 0) == 8
