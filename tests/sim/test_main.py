"""``python -m sim``: a short built-in scenario end to end (JSON, bench outputs) and ``calibrate``."""

from __future__ import annotations

import json

import pytest

from sim.__main__ import main
from sim.scenario import builtin_scenario, simulate
from traffic.records import write_jsonl
from traffic.summary import Summary


@pytest.mark.slow  # every policy and scaling mode of the builtin scenario: many seconds
def test_a_short_builtin_run_reports_every_policy_and_scaling_mode(tmp_path, capsys):
    out = tmp_path / "out.json"
    argv = ["--json", str(out), "--duration-s", "20", "--workers", "1", "--policies", "slo", "largest"]
    assert main([*argv, "--scaling", "static", "engine_load", "--out", str(tmp_path / "runs")]) == 0

    payload = json.loads(out.read_text())
    pairs = {(r["policy"], r["scaling"]) for r in payload["runs"]}
    assert pairs == {(p, s) for p in ("slo", "largest") for s in ("static", "engine_load")}
    for run in payload["runs"]:
        Summary.model_validate(run["summary"])
        assert run["gpu_hours"] > 0
    static = next(r for r in payload["runs"] if r["scaling"] == "static")
    assert static["gpu_hours"] >= 64 * 20 / 3600  # the whole pool, at least for the traffic window
    run_dir = tmp_path / "runs" / "slo-engine_load"
    for name in ("records.jsonl", "summary.json", "report.md", "ttft_cdf.png", "load_over_time.png"):
        assert (run_dir / name).exists(), name
    assert "| slo | static |" in capsys.readouterr().out


def test_calibrate_reads_a_bench_records_file(tmp_path, capsys):
    scenario = builtin_scenario(duration_s=10.0)
    scenario = scenario.model_copy(update={"pools": scenario.pools[:1]})
    result, _ = simulate(scenario, "slo", "static")
    records = tmp_path / "records.jsonl"
    write_jsonl(result.records, records)

    code = main(
        [
            "calibrate",
            "--records",
            str(records),
            "--profile",
            "h200-llama-3.1-8b-int4",
            "--replicas",
            "32",
            "--max-ongoing-requests",
            "128",
            "--json",
            str(tmp_path / "cal.json"),
        ]
    )

    assert code == 0
    calibration = json.loads((tmp_path / "cal.json").read_text())
    p50 = next(r for r in calibration["rows"] if r["metric"] == "ttft_ms" and r["percentile"] == "p50")
    assert abs(p50["relative_error"]) < 0.25
    assert "ttft_ms" in capsys.readouterr().out


def test_calibrate_reports_a_missing_profile_file(tmp_path, capsys):
    records = tmp_path / "records.jsonl"
    records.write_text("")
    assert main(["calibrate", "--records", str(records), "--profile", str(tmp_path / "nope.json")]) == 2
    assert "sim calibrate" in capsys.readouterr().err


def test_the_heterogeneous_scenario_runs_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "out.json"
    argv = ["--scenario", "heterogeneous", "--duration-s", "20", "--workers", "1", "--policies", "slo"]
    assert main([*argv, "--json", str(out)]) == 0

    payload = json.loads(out.read_text())
    assert [(r["policy"], r["scaling"]) for r in payload["runs"]] == [("slo", "static")]
    assert "| slo | static |" in capsys.readouterr().out
