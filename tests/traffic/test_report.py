from datetime import UTC, datetime

from traffic.records import RequestRecord
from traffic.report import machine_info, render_report, write_report
from traffic.summary import summarize


def summary():
    ok = RequestRecord(
        request_id="a", index=0, start_time=1e9, start_s=0.0, arrival_s=0.0, prompt_tokens=4, max_tokens=4,
        output_tokens=4, ttft_s=0.25, e2e_s=1.0, tpot_s=0.25, status=200, slo_met=True, variant="small",
    )  # fmt: skip
    failed = RequestRecord(
        request_id="b", index=1, start_time=1e9, start_s=1.0, arrival_s=1.0, prompt_tokens=4, max_tokens=4,
        status=429, error_type="overloaded", e2e_s=0.0,
    )  # fmt: skip
    return summarize([ok, failed])


def test_report_holds_command_machine_date_summary_and_plots():
    text = render_report(
        summary(),
        command="python -m bench load --url http://127.0.0.1:8000",
        machine={"platform": "Linux-x", "cpus": "2"},
        date=datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
        plots={"TTFT CDF": "ttft_cdf.png"},
    )
    assert "`python -m bench load --url http://127.0.0.1:8000`" in text
    assert "2026-11-30T12:00:00+00:00" in text
    assert "platform Linux-x, cpus 2" in text
    assert "| requests (succeeded / failed) | 2 (1 / 1) |" in text
    assert "| SLO attainment | 50.0% (1/2) |" in text
    assert "| TTFT (ms) | 1 | 250.0 | 250.0 | 250.0 | 250.0 | 250.0 |" in text
    assert "| 429 | 1 |" in text
    assert "| overloaded | 1 |" in text
    assert "| small | 1 | 1 | 1 | 100.0% |" in text
    assert "![TTFT CDF](ttft_cdf.png)" in text


def test_write_report_links_plots_relative_to_it(tmp_path):
    (tmp_path / "plots").mkdir()
    path = write_report(tmp_path, summary(), command="cmd", plots={"CDF": tmp_path / "plots" / "cdf.png"})
    assert path == tmp_path / "report.md"
    assert "![CDF](plots/cdf.png)" in path.read_text()


def test_machine_info():
    info = machine_info()
    assert info["cpus"].isdigit()
    assert info["platform"]
