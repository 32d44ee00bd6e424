"""``python -m sim sweep``: the bench's quick sweep on a simulated fleet, its table, JSON and target."""

from __future__ import annotations

import json

import pytest

from router.config import Policy
from sim.__main__ import build_parser, main
from sim.scenario import SCENARIOS, PoolSpec, RunResult, Scenario
from sim.sweep import SimSweep, SweepRun, bar_line, judge, make_scenario, reseeded, scaled_pools, seeds_verdict
from sim.workload import Stream
from tests.sim.helpers import profile
from traffic.arrivals import PoissonArrivals
from traffic.summary import summarize
from traffic.workload import FixedLength, WorkloadConfig


def test_the_sweep_command_parses():
    args = build_parser().parse_args(["sweep"])
    assert (args.scenario, args.fractions, args.json, args.duration_s) == ("two_variant", [0.5, 1.0], None, None)
    assert args.policies is None  # the scenario's own
    args = build_parser().parse_args(
        ["sweep", "--scenario", "tiers", "--fractions", "0.25", "1", "--policies", "slo", "--duration-s", "30"]
    )
    assert (args.scenario, args.fractions, args.policies, args.duration_s) == ("tiers", [0.25, 1.0], ["slo"], 30.0)


def test_a_tiny_sweep_prints_the_capacity_the_table_and_the_bar_and_writes_json(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    argv = ["sweep", "--scenario", "two_variant", "--duration-s", "10", "--fractions", "0.2", "0.1"]
    assert main([*argv, "--policies", "slo", "least_loaded", "--workers", "1", "--json", str(out)]) == 0

    printed = capsys.readouterr().out
    result = SimSweep.model_validate(json.loads(out.read_text()))
    capacity = result.capacity.capacity
    assert f"Capacity: {capacity:.2f} req/s" in printed
    assert "| llama-70b-bf16-tp2 | 8 | long | 25% |" in printed
    assert sorted((r.run.policy, r.fraction) for r in result.runs) == [
        ("least_loaded", 0.1),
        ("least_loaded", 0.2),
        ("slo", 0.1),
        ("slo", 0.2),
    ]
    for r in result.runs:
        assert r.rate == pytest.approx(r.fraction * capacity)
        assert r.rate_scale == pytest.approx(r.fraction * result.capacity.rate_scale)
        assert r.run.scaling == "static"
        assert r.run.summary.requests > 0
    assert f"| slo | {0.2 * capacity:.2f} |" in printed
    assert "attain. interactive" in printed and "attain. standard" in printed
    assert result.bar is not None and result.bar.rate == pytest.approx(0.2 * capacity)
    assert bar_line(result.bar) in printed
    assert printed.count("**Target:** at ") == 1


def test_a_fleet_scale_grows_every_pool_and_the_traffic_together():
    base = make_scenario(SCENARIOS["two_variant"], 60.0, 1.0)
    scaled = make_scenario(SCENARIOS["two_variant"], 60.0, 1.0, fleet_scale=3.6)
    assert [p.pool_replicas for p in scaled.pools] == [round(3.6 * p.pool_replicas) for p in base.pools]
    assert [s.arrivals.rate for s in scaled.streams] == pytest.approx([3.6 * s.arrivals.rate for s in base.streams])
    with pytest.raises(ValueError):
        scaled_pools(base.pools, 0.0)
    assert [p.pool_replicas for p in scaled_pools(base.pools, 0.01)] == [1, 1]  # never below one replica


def test_the_sweep_says_how_many_gpus_it_simulated(capsys):
    argv = ["sweep", "--scenario", "two_variant", "--duration-s", "5", "--fractions", "0.1", "--policies", "slo"]
    assert main([*argv, "--workers", "1", "--fleet-scale", "2"]) == 0
    assert "Fleet: 36 GPUs." in capsys.readouterr().out  # 2 x (2 one-GPU 8B + 8 TP2 70B)
    assert main([*argv, "--fleet-scale", "0"]) == 2


def _run(policy: Policy, attainment: float) -> RunResult:
    summary = summarize([]).model_copy(update={"slo_attainment": attainment})
    return RunResult(
        policy=policy,
        scaling="static",
        gpu_hours=1.0,
        gpu_hours_by_variant={},
        mean_quality=0.5,
        peak_replicas={},
        wall_s=0.0,
        cpu_s=0.0,
        summary=summary,
    )


def _runs(top: dict[Policy, float], low: dict[Policy, float]) -> list[SweepRun]:
    def at(fraction: float, figures: dict[Policy, float]) -> list[SweepRun]:
        return [
            SweepRun(fraction=fraction, rate_scale=fraction, rate=10 * fraction, run=_run(p, a))
            for p, a in figures.items()
        ]

    return at(0.5, low) + at(1.0, top)


def test_the_bar_is_judged_at_the_top_rate_against_the_best_baseline():
    # At the lower rate the SLO policy would fail; only the top rate counts.
    runs = _runs(top={"slo": 0.95, "least_loaded": 0.79, "largest": 0.2}, low={"slo": 0.5, "least_loaded": 0.99})
    b = judge(runs)
    assert b is not None and b.met and b.rate == 10.0 and b.best_baseline == "least_loaded"
    assert bar_line(b) == (
        "**Target:** at 10.00 req/s: slo 95.0%, best baseline least_loaded 79.0%, margin +16.0% "
        "(target: >= 90% and >= +15%) -> met"
    )
    not_by_margin = judge(_runs(top={"slo": 0.95, "least_loaded": 0.81}, low={}))
    not_by_attainment = judge(_runs(top={"slo": 0.89, "least_loaded": 0.5}, low={}))
    assert not_by_margin is not None and not not_by_margin.met
    assert not_by_attainment is not None and not not_by_attainment.met
    assert bar_line(not_by_margin).endswith("-> NOT met")
    assert judge(_runs(top={"least_loaded": 0.9}, low={})) is None


def test_reseeding_draws_other_traffic_and_seed_0_is_the_scenario_as_built():
    scenario = SCENARIOS["two_variant"](duration_s=10.0)
    assert reseeded(scenario, 0) is scenario
    other = reseeded(scenario, 2)
    assert [s.workload.seed for s in other.streams] == [s.workload.seed + 200 for s in scenario.streams]
    assert other.seed == 2
    assert [s.arrivals for s in other.streams] == [s.arrivals for s in scenario.streams]  # same rates


def test_the_bar_over_seeds_gives_each_margin_the_mean_and_the_worst_pairing():
    seed_0 = judge(_runs(top={"slo": 0.95, "least_loaded": 0.79}, low={}))
    seed_1 = judge(_runs(top={"slo": 0.92, "least_loaded": 0.75}, low={}))
    assert seed_0 is not None and seed_1 is not None
    # Worst pairing: slo's lowest (92%) against the best baseline's highest (79%), +13 points.
    assert seeds_verdict([seed_0, seed_1]) == (
        "Over 2 seeds: margin per seed +16.0%, +17.0%; mean +16.5%; worst pairing +13.0%; target met on 2 of 2"
    )


def test_a_sweep_over_seeds_reports_every_seed_and_the_spread(capsys):
    argv = ["sweep", "--scenario", "two_variant", "--duration-s", "10", "--fractions", "0.2", "--seeds", "2"]
    assert main([*argv, "--policies", "slo", "least_loaded", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "SLO attainment over 2 seeds: mean (range)" in printed
    assert "Over 2 seeds: margin per seed" in printed
    assert printed.count("**Target:** at ") == 1  # the bench-equivalent line is seed 0's


def test_a_scenario_the_natural_split_cannot_place_fails_with_a_message(monkeypatch, capsys):
    def unplaceable(duration_s: float = 10.0, rate_scale: float = 1.0) -> Scenario:
        workload = WorkloadConfig(input_len=FixedLength(value=9000), output_len=FixedLength(value=10))
        return Scenario(
            name="unplaceable",
            duration_s=duration_s,
            pools=[PoolSpec(name="small", profile=profile(context_length=8192), gpus=1)],
            streams=[Stream(name="huge", arrivals=PoissonArrivals(rate=rate_scale), workload=workload)],
        )

    monkeypatch.setitem(SCENARIOS, "unplaceable", unplaceable)
    assert main(["sweep", "--scenario", "unplaceable", "--policies", "slo", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "sim sweep" in err and "'huge'" in err and "fits no pool" in err
