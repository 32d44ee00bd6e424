"""`python -m bench load` end to end against the fake server on loopback."""

import json

import pytest

from bench.__main__ import main
from bench.replicas import read_samples
from traffic.records import read_jsonl

FAST = '{"first_delay_s": 0.02, "gap_s": 0.01}'
OUTPUTS = [
    "records.jsonl",
    "summary.json",
    "report.md",
    "ttft_cdf.png",
    "latency_over_time.png",
    "load_over_time.png",
]


def run(server, out, *args):
    common = ["--model", "m", "--extra-body", FAST, "--no-progress", "--poll-interval-s", "0.05"]
    return main(["load", "--url", server.url, "--out", str(out), *common, *args])


def test_closed_loop_writes_every_output(fake_server, tmp_path, capsys):
    out = tmp_path / "run"
    rc = run(
        fake_server, out, "--concurrency", "2", "--num-requests", "4", "--input-len", "uniform:2:6",
        "--output-len", "3", "--slo-ttft-ms", "5000", "--json", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert rc == 0
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads((tmp_path / "s.json").read_text()) == summary
    assert (summary["requests"], summary["failed"], summary["output_tokens"]) == (4, 0, 12)
    assert summary["slo_attainment"] == 1.0
    records = read_jsonl(out / "records.jsonl")
    assert [r.index for r in records] == [0, 1, 2, 3]
    assert all(2 <= r.prompt_tokens <= 6 and r.slo_ttft_ms == 5000 for r in records)
    assert {s.variant for s in read_samples(out / "replicas.jsonl")} == {"small", "large"}
    report = (out / "report.md").read_text()
    assert "python -m bench load --url" in report
    assert "![TTFT CDF](ttft_cdf.png)" in report
    assert "4 requests (0 failed)" in capsys.readouterr().out


def test_spike_with_tiers_against_a_server_without_variants(bare_server, tmp_path):
    out = tmp_path / "spike"
    rc = run(
        bare_server, out, "--arrival", "spike", "--rate", "20", "--spike-rate", "100",
        "--spike-start-s", "0.1", "--spike-duration-s", "0.1", "--duration-s", "0.3", "--output-len", "2",
        "--tier", "gold:1:5000", "--tier", "bronze:1",
    )  # fmt: skip
    assert rc == 0
    records = read_jsonl(out / "records.jsonl")
    assert all(r.ok for r in records)
    assert {r.slo_tier for r in records} == {"gold", "bronze"}
    assert all(r.arrival_s is not None and r.arrival_s < 0.3 for r in records)
    assert not (out / "replicas.jsonl").exists()
    headers = [h for h, _ in bare_server.app.state.seen[-len(records) :]]
    assert {h["x-slo-tier"] for h in headers} == {"gold", "bronze"}


def test_trace_replay(fake_server, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens,tier\n100,3,2,gold\n100.1,5,4,\n")
    rc = run(fake_server, tmp_path / "out", "--trace", str(trace), "--trace-speedup", "2")
    assert rc == 0
    records = read_jsonl(tmp_path / "out" / "records.jsonl")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.slo_tier) for r in records] == [
        (0.0, 3, 2, "gold"),
        (pytest.approx(0.05), 5, 4, None),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://10.1.2.3:8000", "--num-requests", "1"], "not a loopback"),
        (["--url", "http://127.0.0.1:1", "--api", "chat", "--prompt-mode", "token_ids",
          "--num-requests", "1"], "text"),
        (["--url", "http://127.0.0.1:1"], "bound the run"),
    ],
)  # fmt: skip
def test_bad_configs_exit_2_before_sending(tmp_path, capsys, args, message):
    rc = main(["load", "--model", "m", "--out", str(tmp_path / "o"), "--no-progress", *args])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bad_length_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "load",
                "--url",
                "http://127.0.0.1:1",
                "--model",
                "m",
                "--out",
                str(tmp_path),
                "--input-len",
                "zipf",
            ]
        )
    assert exc.value.code == 2
