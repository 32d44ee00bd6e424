import asyncio
import dataclasses

import pytest

from bench.calibration import VariantCalibration
from bench.loadgen import LoadConfig
from bench.policy_apps import policy_args
from bench.routing import (
    FULL_FRACTIONS,
    QUICK_FRACTIONS,
    RoutingSweep,
    SweepTarget,
    app_args_from_file,
    fixed_replicas,
    probe_burst,
    render_report,
    rescore,
    send_specs,
    sweep_rates,
)
from router.config import LatencyProfile, RouterConfig
from serve_app.config import load_app_config
from tests.conftest import REPO
from tests.traffic.test_routing_results import point, record
from traffic.mix import mixed_requests, routing_mix
from traffic.records import write_jsonl
from traffic.routing_results import bar
from traffic.workload import Slo

ARGS = app_args_from_file(REPO / "serve_config.yaml")


def test_fixed_replicas_holds_autoscaled_variants_at_their_minimum_and_copies():
    assert "autoscaling" in ARGS["variants"][0]
    fixed = fixed_replicas(ARGS)
    assert [v.get("num_replicas") for v in fixed["variants"]] == [1, 1]
    assert all("autoscaling" not in v for v in fixed["variants"])
    assert "autoscaling" in ARGS["variants"][0]  # the input is untouched
    load_app_config(fixed)  # still a valid app config


def test_policy_args_set_the_policy_profiles_and_router_overrides():
    profile = LatencyProfile(prefill_tokens_per_s=5000, base_ttft_ms=20).model_dump()
    args = policy_args(ARGS, "least_loaded", {"small": profile}, {"slo_headroom": 0.2, "policy": "slo"})
    config = load_app_config(args)
    assert config.router.policy == "least_loaded"  # the sweep's policy wins over an override
    assert config.router.slo_headroom == 0.2
    assert config.variant("small").latency_profile == LatencyProfile(**profile)
    assert config.variant("tiny").latency_profile is None
    assert "router" not in ARGS


def test_rates_are_fractions_of_the_capacity():
    assert sweep_rates(4.0, QUICK_FRACTIONS) == [2.0, 4.0]
    assert sweep_rates(4.0, FULL_FRACTIONS)[-1] == 5.0


def a_sweep(points) -> RoutingSweep:
    calibration = VariantCalibration(
        variant="small", profile=LatencyProfile(), short_per_s=5.0, long_s=0.6, long_per_s=1.1,
        ttft_short_ms=30, ttft_long_ms=300, tpot_batch_1_ms=8, tpot_burst_ms=17, tpot_context_ms=21,
    )  # fmt: skip
    return RoutingSweep(
        command="python -m bench routing --quick", date="2026-11-30T00:00:00+00:00", machine={"cpus": "2"},
        wall_s=280.0, notes=["a note"], mix=routing_mix(), calibration=[calibration], capacity_rps=4.0,
        rates=[2.0], duration_s=10.0, points=points, bar=bar(points),
    )  # fmt: skip


def test_report_has_the_calibration_the_table_and_the_verdict():
    sweep = a_sweep([point("slo", 2.0, 9), point("largest", 2.0, 8)])
    text = render_report(sweep, ["tiny", "small"], ["interactive", "standard"], "sweep.png")
    assert "| small | 50 | 2,000 | 50.0 | 1.00 | 17.0 / 21.0 / - | 0.00 | - | 5.0 | 0.60 | 1.10 |" in text
    assert "| slo | 2.00 | 10 | 90.0% |" in text
    assert "margin +10.0%" in text and "**NOT met**" in text
    assert "![attainment and goodput vs rate](sweep.png)" in text
    assert RoutingSweep.model_validate_json(sweep.model_dump_json()) == sweep


def test_rescore_adds_the_steady_attainment_to_a_finished_run(tmp_path):
    # A run from before the column: its 10 requests were sent at 0..9 s of 10 s points; the slo one missed its
    # first two, the largest one its last two.
    sweep = a_sweep([point("slo", 2.0, 8), point("largest", 2.0, 8)])
    (tmp_path / "sweep.json").write_text(sweep.model_dump_json())
    write_jsonl([record(i, met=i >= 2) for i in range(10)], tmp_path / "slo" / "rate-2" / "records.jsonl")
    write_jsonl([record(i, met=i < 8) for i in range(10)], tmp_path / "largest" / "rate-2" / "records.jsonl")

    rescored = rescore(tmp_path)

    assert [p.steady_attainment for p in rescored.points] == [1.0, 0.75]
    assert RoutingSweep.model_validate_json((tmp_path / "sweep.json").read_text()) == rescored
    assert "| slo | 2.00 | 10 | 80.0% | 100.0% |" in (tmp_path / "report.md").read_text()
    assert rescored.notes[-1].endswith(f"--rescore {tmp_path}")
    assert rescore(tmp_path).notes == rescored.notes  # once


@pytest.mark.serve
def test_mixed_requests_through_the_default_app_are_routed_by_length(llm_url, default_app_args):
    tiers = RouterConfig.model_validate(default_app_args.get("router", {})).tiers
    # Half long, so that a handful of requests has both kinds; short outputs keep it quick.
    mix = routing_mix(interactive_share=0.5, short_output=4, long_output=4, long_tokens=(1100, 1400), seed=1)
    target = SweepTarget(default_app_args["model_name"], mix, dict(tiers), timeout_s=120.0)
    specs = list(mixed_requests(mix, tiers, [None] * 6))
    assert {s.slo.tier for s in specs} == {"interactive", "standard"}
    # Sent with a TTFT target no machine misses: the app's latency models learn from every test before this one on
    # a shared app, and on a busy machine its tiers' targets would have the router shed (429) what this test sends;
    # routing by length is the context check, whatever the target.
    specs = [dataclasses.replace(s, slo=Slo(ttft_ms=600_000.0)) for s in specs]
    records = asyncio.run(send_specs(llm_url, target, specs, LoadConfig(concurrency=2, num_requests=6, progress=False)))
    assert [r.index for r in records] == list(range(6))
    for r in records:
        assert r.ok, (r.status, r.error_type, r.error_message)
        assert r.variant in {"tiny", "small"} and r.route_reason
        assert r.output_tokens == 4
        if r.prompt_tokens > 1024:  # beyond tiny's context: only small holds it
            assert r.variant == "small"


def test_the_calibration_burst_is_a_quarter_of_the_batch_slots_within_8_to_32():
    assert probe_burst(16) == 8  # the default CPU config: as before
    assert probe_burst(64) == 16
    assert probe_burst(128) == 32  # the GPU configs
    assert probe_burst(1024) == 32
