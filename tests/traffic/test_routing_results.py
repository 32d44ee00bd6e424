import dataclasses

import pytest

from traffic.records import RequestRecord
from traffic.routing_results import (
    bar,
    interference_table,
    markdown_table,
    mean_quality,
    prediction_table,
    reason_counts,
    reasons_table,
    short_behind_long,
    steady_attainment,
    sweep_point,
    variant_shares,
)

QUALITY = {"tiny": 0.3, "small": 0.6}


def record(i, variant="tiny", met=True, prompt_tokens=64, **kw):
    base = RequestRecord(
        request_id=f"r{i}", index=i, start_time=1e9 + i, start_s=float(i), arrival_s=float(i),
        prompt_tokens=prompt_tokens, max_tokens=32, output_tokens=32, ttft_s=0.1, tpot_s=0.01, e2e_s=0.5,
        status=200, variant=variant, route_reason="slo_met_best_quality", slo_tier="interactive",
    )  # fmt: skip
    r = dataclasses.replace(base, **kw)
    r.slo_met = met and r.ok
    return r


def rejected(i):
    return record(
        i, variant=None, met=False, status=429, error_type="rate_limit_error", route_reason="rejected_overloaded"
    )


def point(policy, rate, attained, n=10):
    records = [record(i, met=i < attained) for i in range(n)]
    return sweep_point(policy, rate, records, long_prompt_tokens=1024, qualities=QUALITY)


def test_shares_and_reasons_count_every_request_refusals_included():
    records = [record(0), record(1, variant="small"), record(2, variant="small"), rejected(3)]
    assert variant_shares(records) == {"none": 0.25, "small": 0.5, "tiny": 0.25}
    assert reason_counts(records) == {"rejected_overloaded": 1, "slo_met_best_quality": 3}
    assert reason_counts([record(0, route_reason=None)]) == {"none": 1}
    assert variant_shares([]) == {}


def test_a_point_counts_long_prompts_per_variant_and_the_quality_of_what_met():
    records = [
        record(0, variant="small", prompt_tokens=2000),
        record(1, variant="small", prompt_tokens=3000, met=False),
        record(2, variant="tiny"),
        record(3, variant="tiny", met=False),
        rejected(4),
    ]
    p = sweep_point("slo", 2.0, records, long_prompt_tokens=1024, qualities=QUALITY)
    assert p.long_on_variant == {"small": 2}
    assert p.quality_met == pytest.approx((0.6 + 0.3) / 2)  # requests 0 and 2 met their SLO
    assert p.summary.slo_attainment == pytest.approx(2 / 5)
    assert p.summary.errors_by_status == {"429": 1}
    assert mean_quality([record(0, met=False)], QUALITY) is None


def test_the_steady_part_of_a_point_leaves_out_its_first_fifth():
    # Requests sent at 0..9 s of a 10 s point; the first two (before 2 s) missed.
    records = [record(i, met=i >= 2) for i in range(10)]
    p = sweep_point("slo", 2.0, records, long_prompt_tokens=1024, qualities=QUALITY, duration_s=10.0)
    assert p.summary.slo_attainment == pytest.approx(0.8)
    assert p.steady_attainment == 1.0
    assert steady_attainment(records, 20.0) is None
    assert sweep_point("slo", 2.0, records, long_prompt_tokens=1024, qualities=QUALITY).steady_attainment is None


def test_the_bar_compares_the_slo_policy_with_the_best_baseline_at_the_highest_rate():
    points = [point("slo", 1.0, 5), point("slo", 2.0, 10), point("largest", 2.0, 8), point("round_robin", 2.0, 6)]
    b = bar(points)
    assert (b.rate, b.attainment, b.best_baseline, b.best_baseline_attainment) == (2.0, 1.0, "largest", 0.8)
    assert b.margin == pytest.approx(0.2)
    assert b.met
    # 0.1 above the best baseline is not enough, and neither is a margin with attainment below 0.9.
    assert not bar([point("slo", 2.0, 9), point("largest", 2.0, 8)]).met
    assert not bar([point("slo", 2.0, 8), point("largest", 2.0, 5)]).met
    alone = bar([point("slo", 2.0, 10)])
    assert alone.best_baseline is None and alone.margin is None and not alone.met
    with pytest.raises(ValueError, match="no point of policy 'slo'"):
        bar([point("largest", 2.0, 8)])


def test_markdown_table_has_one_row_per_point_with_shares_and_tiers():
    points = [point("slo", 1.0, 5), point("largest", 1.0, 10)]
    lines = markdown_table(points, ["tiny", "small"], ["interactive", "standard"]).splitlines()
    assert len(lines) == 2 + len(points)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:5] == ["policy", "rate (req/s)", "requests", "SLO attainment", "after the first 20%"]
    assert "share tiny" in header and "attain. interactive" in header
    slo = dict(zip(header, (c.strip() for c in lines[2].strip("|").split("|")), strict=True))
    assert slo["policy"] == "slo" and slo["SLO attainment"] == "50.0%" and slo["attain. interactive"] == "50%"
    assert slo["attain. standard"] == "-" and slo["share tiny"] == "100%" and slo["share small"] == "0%"
    assert slo["errors by status"] == "-" and slo["quality of met"] == "0.30"


def test_reasons_table_lists_every_reason_seen():
    points = [
        sweep_point("slo", 1.0, [record(0), rejected(1)], long_prompt_tokens=1024, qualities=QUALITY),
        sweep_point("largest", 1.0, [record(0, route_reason="largest")], long_prompt_tokens=1024, qualities=QUALITY),
    ]
    lines = reasons_table(points).splitlines()
    assert lines[0] == "| policy | rate | largest | rejected_overloaded | slo_met_best_quality |"
    assert lines[2] == "| slo | 1.00 | 0 | 1 | 1 |"
    assert lines[3] == "| largest | 1.00 | 1 | 0 | 0 |"


def test_short_requests_are_split_by_whether_a_long_prompt_was_in_flight_on_their_variant():
    records = [
        record(0, variant="small", prompt_tokens=2000, start_s=0.0, e2e_s=3.0),  # small busy during [0, 3)
        record(1, variant="small", start_s=1.0, met=False),  # behind the long prompt
        record(2, variant="tiny", start_s=1.5),  # another variant: clear
        record(3, variant="small", start_s=3.5),  # after it ended: clear
        rejected(4),  # no variant: not counted
    ]
    assert short_behind_long(records, 1024) == {
        "small behind long": (1, 0),
        "small clear": (1, 1),
        "tiny clear": (1, 1),
    }
    p = sweep_point("slo", 1.0, records, long_prompt_tokens=1024, qualities=QUALITY)
    lines = interference_table([p]).splitlines()
    assert lines[0] == "| policy | rate | small behind long | small clear | tiny clear |"
    assert lines[2] == "| slo | 1.00 | 0/1 | 1/1 | 1/1 |"


def test_a_point_carries_the_routers_prediction_accuracy_per_variant_and_the_table_shows_it():
    # ttft 100 ms and tpot 10 ms measured against predictions of 50 ms and 10 ms.
    records = [record(i, predicted_ttft_ms=50.0, predicted_tpot_ms=10.0) for i in range(3)] + [rejected(3)]

    p = sweep_point("slo", 2.0, records, long_prompt_tokens=1024, qualities=QUALITY)

    assert set(p.prediction) == {"tiny"}
    assert (p.prediction["tiny"].ttft.count, p.prediction["tiny"].ttft.p50) == (3, pytest.approx(2.0))
    assert (
        prediction_table([p]).splitlines()[2] == "| slo | 2.00 | tiny | 3 | 2.00 / 2.00 | - / - | - | - | 1.00 / 1.00 |"
    )
