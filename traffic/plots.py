"""PNG plots of a run: TTFT CDF, latency over time, and offered load beside replicas over time.

Figures are built with matplotlib's object API (``Figure`` + its own Agg canvas), never pyplot:
no global backend or figure state, so plotting is safe in tests and in threads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from traffic.records import RequestRecord
from traffic.replicas import ReplicaSample


def ttft_cdf(records: Sequence[RequestRecord], path: str | Path) -> Path:
    ttfts = np.sort([r.ttft_s * 1e3 for r in records if r.ok and r.ttft_s is not None])
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    if len(ttfts):
        ax.step(ttfts, np.arange(1, len(ttfts) + 1) / len(ttfts), where="post")
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"TTFT CDF ({len(ttfts)} successful requests)")
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=100)
    return Path(path)


def latency_over_time(records: Sequence[RequestRecord], path: str | Path) -> Path:
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.scatter([r.start_s for r in ok], [(r.e2e_s or 0) * 1e3 for r in ok], s=8, label="end-to-end")
    ax.scatter(
        [r.start_s for r in ok if r.ttft_s is not None],
        [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None],
        s=8,
        label="TTFT",
    )
    if failed:
        ax.scatter(
            [r.start_s for r in failed],
            [(r.e2e_s or 0) * 1e3 for r in failed],
            s=16,
            marker="x",
            label="failed",
        )
    ax.set_xlabel("send time (s from start)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency by send time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.savefig(path, dpi=100)
    return Path(path)


def offered_load(records: Sequence[RequestRecord], bin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(bin start times, requests sent per second in each bin)."""
    end = max((r.start_s for r in records), default=0.0)
    edges = np.arange(0.0, (math.floor(end / bin_s) + 1) * bin_s + bin_s / 2, bin_s)
    counts, _ = np.histogram([r.start_s for r in records], bins=edges)
    return edges[:-1], counts / bin_s


def load_over_time(
    records: Sequence[RequestRecord],
    path: str | Path,
    replicas: Sequence[ReplicaSample] = (),
    bin_s: float = 1.0,
) -> Path:
    """Offered load (sends per second) and, when samples are given, each variant's replicas below it."""
    fig = Figure(figsize=(8, 6 if replicas else 3.5), layout="constrained")
    axes = fig.subplots(2 if replicas else 1, 1, sharex=True, squeeze=False)[:, 0]
    starts, rate = offered_load(records, bin_s)
    axes[0].bar(starts, rate, width=bin_s, align="edge", alpha=0.7)
    axes[0].set_ylabel(f"offered load (req/s, {bin_s:g} s bins)")
    axes[0].set_title("Load and replicas over time" if replicas else "Offered load over time")
    axes[0].grid(alpha=0.3)
    if replicas:
        for variant in sorted({s.variant for s in replicas}):
            points = sorted((s.t_s, s.replicas) for s in replicas if s.variant == variant)
            axes[1].step([t for t, _ in points], [n for _, n in points], where="post", label=variant)
        # From 0: a replica count read against a zoomed axis exaggerates every change.
        axes[1].set_ylim(0, max(s.replicas for s in replicas) + 1)
        axes[1].set_ylabel("replicas")
        axes[1].yaxis.get_major_locator().set_params(integer=True)
        axes[1].legend(loc="upper left")
        axes[1].grid(alpha=0.3)
    axes[-1].set_xlabel("time (s from start)")
    fig.savefig(path, dpi=100)
    return Path(path)


def write_plots(
    records: Sequence[RequestRecord],
    out_dir: str | Path,
    replicas: Sequence[ReplicaSample] = (),
    bin_s: float = 1.0,
) -> dict[str, Path]:
    """All plots of a run into ``out_dir``; their titles mapped to their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "TTFT CDF": ttft_cdf(records, out / "ttft_cdf.png"),
        "Latency over time": latency_over_time(records, out / "latency_over_time.png"),
        "Load and replicas over time": load_over_time(records, out / "load_over_time.png", replicas, bin_s),
    }


def spike_plot(
    records_by_mode: Mapping[str, Sequence[RequestRecord]],
    replicas_by_mode: Mapping[str, Sequence[ReplicaSample]],
    variants: Sequence[str],
    path: str | Path,
    bin_s: float = 2.0,
) -> Path:
    """The spike bench's comparison: offered load on top, then one panel per variant with its ready replicas
    over time under each scaling mode, and the requests each mode's run answered within the SLO."""
    fig = Figure(figsize=(9, 2.6 * (len(variants) + 1)), layout="constrained")
    axes = fig.subplots(len(variants) + 1, 1, sharex=True, squeeze=False)[:, 0]
    first = next(iter(records_by_mode.values()), [])
    starts, rate = offered_load(first, bin_s)
    axes[0].bar(starts, rate, width=bin_s, align="edge", alpha=0.35, color="gray", label="offered")
    for mode, records in records_by_mode.items():
        met = [r for r in records if r.slo_met]
        if met:
            edges = np.append(starts, starts[-1] + bin_s) if len(starts) else np.array([0.0, bin_s])
            counts, _ = np.histogram([r.start_s for r in met], bins=edges)
            axes[0].step(edges[:-1], counts / bin_s, where="post", label=f"met SLO: {mode}")
    axes[0].set_ylabel(f"req/s ({bin_s:g} s bins)")
    axes[0].set_title("Offered load, and replicas per variant under each scaling mode")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].grid(alpha=0.3)
    for ax, variant in zip(axes[1:], variants, strict=True):
        top = 1
        for mode, samples in replicas_by_mode.items():
            points = sorted((s.t_s, s.replicas) for s in samples if s.variant == variant)
            if points:
                ax.step([t for t, _ in points], [n for _, n in points], where="post", label=mode)
                top = max(top, max(n for _, n in points))
        ax.set_ylim(0, top + 1)  # from 0: a zoomed axis exaggerates every change
        ax.set_ylabel(f"{variant}\nready replicas")
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s from start)")
    fig.savefig(path, dpi=100)
    return Path(path)
