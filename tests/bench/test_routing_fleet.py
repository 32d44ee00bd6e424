"""bench.routing_fleet: the real-stack / simulator comparison and its verdicts, from records."""

from __future__ import annotations

from bench.routing_fleet import FleetPoint, comparison_table, sim_gaps
from traffic.records import RequestRecord
from traffic.routing_results import sweep_point


def _records(met: int, missed: int, variant: str = "fast") -> list[RequestRecord]:
    out = []
    for i in range(met + missed):
        ok = i < met
        out.append(
            RequestRecord(
                request_id=str(i),
                index=i,
                start_time=float(i),
                start_s=float(i),
                arrival_s=float(i),
                prompt_tokens=100,
                max_tokens=10,
                output_tokens=10,
                ttft_s=0.1 if ok else 1.0,
                e2e_s=0.2 if ok else 2.0,
                status=200,
                slo_tier="interactive",
                slo_ttft_ms=300.0,
                slo_tpot_ms=50.0,
                slo_met=ok,
                variant=variant,
                route_reason="slo_met_best_quality",
            )
        )
    return out


def _point(policy: str, real: tuple[int, int], sim: tuple[int, int]) -> FleetPoint:
    def one(counts: tuple[int, int]):
        return sweep_point(policy, 10.0, _records(*counts), long_prompt_tokens=1024, qualities={"fast": 0.6})

    return FleetPoint(fraction=1.0, real=one(real), sim=one(sim))


def test_the_gap_is_real_minus_simulated_attainment_per_policy_and_rate():
    points = [_point("slo", (90, 10), (95, 5)), _point("round_robin", (60, 40), (50, 50))]
    gaps = sim_gaps(points)
    assert round(gaps[("slo", 10.0)], 3) == -0.05
    assert round(gaps[("round_robin", 10.0)], 3) == 0.10


def test_the_table_shows_both_sides_of_every_point():
    table = comparison_table([_point("slo", (90, 10), (95, 5))], ["fast"], ["interactive"])
    row = table.splitlines()[2]
    assert row.startswith("| slo | 10.00 | 100 | 90.0% / 95.0% | -5.0% |")
    assert "100% / 100%" in row  # the share of the one variant, both sides
