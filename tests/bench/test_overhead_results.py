import json

import pytest

from bench.overhead_results import (
    PATHS,
    LevelResult,
    OverheadResult,
    PathResult,
    level_result,
    render_markdown,
    render_table,
    with_ratios,
    write_report,
)
from traffic.records import RequestRecord
from traffic.summary import summarize


def level(c: int, tokens_per_s: float, errors: int = 0) -> LevelResult:
    return LevelResult(
        concurrency=c,
        requests=2 * c,
        errors=errors,
        output_tokens=int(tokens_per_s),
        duration_s=1.0,
        tokens_per_s=tokens_per_s,
        ttft_p50_ms=10.0,
        ttft_p99_ms=20.0,
    )


def result(**paths: PathResult) -> OverheadResult:
    return OverheadResult(
        command="python -m bench overhead",
        machine={"cpus": "2"},
        date="2026-11-30T00:00:00+00:00",
        model="builtin:tiny",
        device="cpu",
        prompt_tokens=32,
        max_tokens=64,
        concurrency=[1, 16],
        num_requests={1: 8, 16: 32},
        paths=with_ratios(paths),
    )


def path(name: str, **levels: float) -> PathResult:
    return PathResult(description=PATHS[name], levels={int(c[1:]): level(int(c[1:]), v) for c, v in levels.items()})


def test_ratios_divide_by_each_baseline_at_the_same_level():
    r = result(
        direct=path("direct", c1=100.0, c16=1000.0),
        engine_server=path("engine_server", c1=50.0, c16=800.0),
        stack=path("stack", c1=90.0, c16=850.0),
    )
    stack = r.paths["stack"].levels
    assert stack[1].ratio_vs_direct == pytest.approx(0.9)
    assert stack[16].ratio_vs_direct == pytest.approx(0.85)
    assert stack[1].ratio_vs_engine_server == pytest.approx(1.8)
    assert stack[16].ratio_vs_engine_server == pytest.approx(850 / 800)
    assert r.paths["direct"].levels[16].ratio_vs_direct == pytest.approx(1.0)


def test_a_skipped_baseline_leaves_its_ratio_empty():
    r = result(
        direct=path("direct", c1=100.0),
        engine_server=PathResult(description=PATHS["engine_server"], skipped="not installed"),
        naive_serve=path("naive_serve", c1=40.0, c16=300.0),
    )
    naive = r.paths["naive_serve"].levels
    assert naive[1].ratio_vs_engine_server is None
    assert naive[1].ratio_vs_direct == pytest.approx(0.4)
    assert naive[16].ratio_vs_direct is None  # direct has no level 16


def test_json_shape_per_path_and_level():
    r = result(direct=path("direct", c1=100.0, c16=1000.0), stack=path("stack", c1=90.0, c16=850.0))
    data = json.loads(r.model_dump_json())
    assert {"command", "machine", "date", "model", "device", "concurrency", "paths"} <= data.keys()
    level16 = data["paths"]["stack"]["levels"]["16"]
    for key in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "errors", "ratio_vs_direct", "ratio_vs_engine_server"):
        assert key in level16
    assert level16["ratio_vs_direct"] == pytest.approx(0.85)
    assert OverheadResult.model_validate(data) == r  # reads back


def test_level_result_takes_the_summary_figures():
    records = [
        RequestRecord("a", 0, 0.0, 0.0, None, 4, 10, output_tokens=10, ttft_s=0.1, e2e_s=1.0),
        RequestRecord("b", 1, 0.0, 0.0, None, 4, 10, output_tokens=10, ttft_s=0.3, e2e_s=2.0),
        RequestRecord("c", 2, 0.0, 0.0, None, 4, 10, error_type="timeout", e2e_s=2.0),
    ]
    lv = level_result(2, summarize(records))
    assert (lv.requests, lv.errors, lv.output_tokens) == (3, 1, 20)
    assert lv.tokens_per_s == pytest.approx(10.0)  # 20 tokens over 2 s
    assert lv.ttft_p50_ms == pytest.approx(200.0)


def test_table_and_report_show_every_path_and_the_skip_reason(tmp_path):
    r = result(
        direct=path("direct", c1=100.0, c16=1000.0),
        engine_server=PathResult(description=PATHS["engine_server"], skipped="no transformers serve"),
        stack=path("stack", c1=90.0, c16=850.0),
    )
    table = render_table(r).splitlines()
    assert table[0].split()[:3] == ["path", "streams", "tokens/s"]
    assert [line.split()[0] for line in table[1:]] == ["direct", "direct", "engine_server", "stack", "stack"]
    assert "skipped: no transformers serve" in table[3]
    assert table[5].split()[-2:] == ["0.85", "-"]
    markdown = render_markdown(r, "plot.png")
    assert "| stack | 16 | 850.0 |" in markdown
    assert "![tokens/s per path and concurrency](plot.png)" in markdown
    report = write_report(r, tmp_path)
    assert (tmp_path / "tokens_per_s.png").stat().st_size > 0
    assert "tokens_per_s.png" in report.read_text()


def test_cpu_per_token_leaves_out_the_load_generator_and_the_profiler():
    lv = level(16, 100.0).model_copy(
        update={"cpu_s": {"variant-engine": 0.4, "Ingress": 0.1, "load_generator": 0.3, "profiler": 0.2}}
    )
    assert lv.output_tokens == 100
    assert lv.cpu_ms_per_token() == pytest.approx(5.0)  # (0.4 + 0.1) s over 100 tokens
    assert lv.cpu_ms_per_token("Ingress") == pytest.approx(1.0)
    assert level(1, 10.0).cpu_ms_per_token() is None  # nothing was read
    r = result(stack=PathResult(description=PATHS["stack"], levels={16: lv}))
    markdown = render_markdown(r)
    assert "| stack | 16 | 5.00 | variant-engine 4.00, load_generator 3.00, profiler 2.00, Ingress 1.00 |" in markdown


def test_the_report_gives_the_host_speed_the_run_measured():
    from bench.host_speed import python_ms

    measured = python_ms(repeats=3)
    r = result(direct=path("direct", c1=100.0)).model_copy(update={"host_python_ms": [measured, 1.25]})

    assert measured > 0
    assert f"{measured:.2f} / 1.25" in render_markdown(r)
    assert OverheadResult.model_validate_json(r.model_dump_json()).host_python_ms == [measured, 1.25]
    assert "Host speed" not in render_markdown(result(direct=path("direct", c1=100.0)))  # older runs: no line
