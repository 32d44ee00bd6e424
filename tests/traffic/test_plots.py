import numpy as np
import pytest

from traffic.plots import offered_load, write_plots
from traffic.records import RequestRecord
from traffic.replicas import ReplicaSample

PNG = b"\x89PNG\r\n\x1a\n"


def records():
    out = []
    for i in range(20):
        r = RequestRecord(
            request_id=str(i), index=i, start_time=1e9, start_s=i * 0.25, arrival_s=i * 0.25,
            prompt_tokens=4, max_tokens=4, output_tokens=4, ttft_s=0.1 + i / 100, e2e_s=0.4, status=200,
        )  # fmt: skip
        if i % 7 == 0:
            r.error_type, r.status = "overloaded", 429
        out.append(r)
    return out


def test_offered_load_bins_by_hand():
    starts, rate = offered_load(records(), bin_s=2.0)  # sends at 0, 0.25, ..., 4.75
    assert list(starts) == [0.0, 2.0, 4.0]
    assert list(rate) == pytest.approx([4.0, 4.0, 2.0])  # 8, 8 and 4 sends per 2 s


@pytest.mark.parametrize("replicas", [[], [ReplicaSample(0, "small", 1), ReplicaSample(2, "small", 3)]])
def test_plots_are_written(tmp_path, replicas):
    paths = write_plots(records(), tmp_path / "plots", replicas)
    assert set(paths) == {"TTFT CDF", "Latency over time", "Load and replicas over time"}
    for path in paths.values():
        assert path.read_bytes().startswith(PNG)


def test_plots_of_an_empty_run(tmp_path):
    paths = write_plots([], tmp_path)
    assert all(p.stat().st_size > 0 for p in paths.values())
    assert np.sum(offered_load([], 1.0)[1]) == 0


def test_the_spike_plot_draws_every_variant_under_every_mode(tmp_path):
    from traffic.plots import spike_plot

    met = records()
    for r in met:
        r.slo_met = r.status == 200
    replicas = {
        "engine_load": [ReplicaSample(0, "small", 1), ReplicaSample(2, "small", 3), ReplicaSample(0, "big", 1)],
        "fixed": [ReplicaSample(0, "small", 4), ReplicaSample(0, "big", 2)],
    }

    path = spike_plot({"engine_load": met, "fixed": met}, replicas, ["small", "big"], tmp_path / "spike.png")

    assert path.read_bytes().startswith(PNG)
