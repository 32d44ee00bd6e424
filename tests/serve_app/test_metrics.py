"""serve_app.metrics: the Grafana dashboard and the exported metrics use exactly the same names; the per-chunk
observations made off the event loop are all made, in order, with their tags."""

from __future__ import annotations

import json
import re
import threading
import time

from serve_app.metrics import METRIC_NAMES, OffLoop, OffLoopRecorder
from tests.conftest import REPO

DASHBOARD = REPO / "docs" / "grafana-dashboard.json"


def _dashboard_metric_names() -> set[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    # Ray exports application metrics as ray_<name>; histograms add _bucket/_count/_sum.
    return {re.sub(r"_(bucket|count|sum)$", "", m) for m in re.findall(r"\bray_(vs_[a-z0-9_]+)", exprs)}


def test_every_dashboard_query_names_an_exported_metric():
    assert _dashboard_metric_names() <= set(METRIC_NAMES)


def test_every_exported_metric_is_on_the_dashboard():
    assert set(METRIC_NAMES) <= _dashboard_metric_names()


def test_metric_names_match_what_the_code_registers():
    source = (REPO / "serve_app" / "metrics.py").read_text()
    constructors = r"(?:metrics\.(?:Counter|Gauge|Histogram)|counter|histogram)"  # the last two wrap the first
    registered = set(re.findall(constructors + r'\(\s*"(vs_[a-z0-9_]+)"', source))
    assert registered == set(METRIC_NAMES)


class _Histogram:
    """Records observe calls and the threads they came from, as Ray's histogram would receive them."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, dict[str, str], str]] = []

    def observe(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((value, tags, threading.current_thread().name))


def _wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_off_loop_records_every_value_in_order_off_the_callers_thread():
    histogram, counter = _Histogram(), _Counter()
    recorder = OffLoopRecorder(period_s=0.01)
    observed, counted = OffLoop(histogram, recorder), OffLoop(counter, recorder)
    tags = {"variant": "tiny"}
    for i in range(100):
        observed.observe(i / 1000, tags)
        counted.inc(i, tags)

    _wait_for(lambda: len(histogram.calls) == 100 and len(counter.calls) == 100)
    assert [c[0] for c in histogram.calls] == [i / 1000 for i in range(100)]
    assert [c[0] for c in counter.calls] == list(range(100))
    assert all(c[1] is tags for c in histogram.calls + counter.calls)
    assert {c[2] for c in histogram.calls + counter.calls} == {"vs-metrics-recorder"}


def test_off_loop_keeps_the_newest_when_too_many_wait():
    histogram = _Histogram()
    observed = OffLoop(histogram, OffLoopRecorder(period_s=0.5, max_pending=3))
    for i in range(5):
        observed.observe(float(i), {"variant": "tiny"})

    _wait_for(lambda: len(histogram.calls) == 3)
    assert [c[0] for c in histogram.calls] == [2.0, 3.0, 4.0]


class _Counter:
    """Records inc calls and the threads they came from, as Ray's counter would receive them."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, dict[str, str], str]] = []

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append((value, tags, threading.current_thread().name))


def _recorder_metrics() -> object:
    from types import SimpleNamespace

    counter = _Counter()
    return SimpleNamespace(
        requests=counter,
        cancelled=counter,
        prompt_tokens=counter,
        completion_tokens=counter,
        slo=counter,
        ttft=_Histogram(),
        e2e=_Histogram(),
        itl=_Histogram(),
        prediction_ratio=_Histogram(),
    )


def test_a_served_request_records_measured_over_predicted_per_measure():
    from router import Prediction
    from serve_app.metrics import RequestRecorder

    m = _recorder_metrics()
    recorder = RequestRecorder(m, "tiny", 300.0, 50.0, Prediction(ttft_ms=1e-3, tpot_ms=1e-3, meets_slo=True))
    # Two monotonic readings can be under a microsecond apart on a fast machine: let real time pass.
    time.sleep(0.002)
    recorder.chunk(1)
    time.sleep(0.002)
    recorder.chunk(5)
    time.sleep(0.01)
    recorder.finish(10, 5, 200)
    ratios = {tags["measure"]: value for value, tags, _ in m.prediction_ratio.calls}
    assert set(ratios) == {"ttft", "tpot"}
    assert all(tags["variant"] == "tiny" for _, tags, _ in m.prediction_ratio.calls)
    assert all(value > 1.0 for value in ratios.values())  # a microsecond was predicted: anything real is slower


def test_failed_or_unpredicted_requests_record_no_prediction_error():
    from router import Prediction
    from serve_app.metrics import RequestRecorder

    m = _recorder_metrics()
    failed = RequestRecorder(m, "tiny", None, None, Prediction(ttft_ms=10.0, tpot_ms=5.0, meets_slo=True))
    failed.chunk(1)
    failed.finish(10, 1, 500)
    unpredicted = RequestRecorder(m, "tiny", None, None)
    unpredicted.chunk(1)
    unpredicted.finish(10, 1, 200)
    single = RequestRecorder(m, "tiny", None, None, Prediction(ttft_ms=10.0, tpot_ms=5.0, meets_slo=True))
    single.chunk(1)
    single.finish(10, 1, 200)
    assert [tags["measure"] for _, tags, _ in m.prediction_ratio.calls] == ["ttft"]  # one token: no TPOT


def test_grpc_code_is_the_status_the_grpc_boundary_answers():
    import grpc

    from core.errors import ContextTooLongError, EngineDeadError, OverloadedError, RequestTimeoutError
    from serve_app.grpc_errors import grpc_status
    from serve_app.metrics import grpc_code

    for error in (
        ContextTooLongError("too long", prompt_tokens=9, context_length=8),
        OverloadedError("busy", retry_after_s=1.0),
        RequestTimeoutError("late"),
        EngineDeadError("gone"),
        RuntimeError("not ours"),
    ):
        assert grpc_code(500, error) == grpc_status(error).code.name
    assert (grpc_code(200, None), grpc_code(499, None)) == ("OK", "CANCELLED")
    assert grpc_code(503, EngineDeadError("gone")) == grpc.StatusCode.UNAVAILABLE.name


def test_count_request_puts_each_protocol_in_its_own_counter():
    from types import SimpleNamespace

    from core.errors import OverloadedError
    from serve_app.metrics import count_request

    http, grpc_counter = _Counter(), _Counter()
    m = SimpleNamespace(requests=http, grpc_requests=grpc_counter)
    count_request(m, {"variant": "tiny"}, 429, OverloadedError("busy"), grpc=False)  # type: ignore[arg-type]
    count_request(m, {"variant": "tiny"}, 429, OverloadedError("busy"), grpc=True)  # type: ignore[arg-type]
    assert [c[:2] for c in http.calls] == [(1, {"variant": "tiny", "status": "429"})]
    assert [c[:2] for c in grpc_counter.calls] == [(1, {"variant": "tiny", "code": "RESOURCE_EXHAUSTED"})]
