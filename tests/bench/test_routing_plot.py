from bench.routing_plot import sweep_plot
from tests.traffic.test_routing_results import point


def test_sweep_plot_writes_a_png(tmp_path):
    points = [point(policy, rate, n) for policy in ("slo", "largest") for rate, n in ((1.0, 9), (2.0, 4))]
    path = sweep_plot(points, tmp_path / "sweep.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
