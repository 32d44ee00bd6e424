"""The routing sweep's figure: SLO attainment and goodput against offered rate, one line per policy.

Built with matplotlib's object API (``Figure`` + its own Agg canvas), never pyplot, like ``traffic.plots``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from traffic.routing_results import SweepPoint


def sweep_plot(points: Sequence[SweepPoint], path: str | Path) -> Path:
    fig = Figure(figsize=(10, 4), layout="constrained")
    attainment, goodput = fig.subplots(1, 2)
    for policy in dict.fromkeys(p.policy for p in points):  # first-seen order, the sweep's
        mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.rate)
        rates = [p.rate for p in mine]
        style = {"marker": "o", "linewidth": 2.5 if policy == "slo" else 1.2, "label": policy}
        attainment.plot(rates, [p.summary.slo_attainment for p in mine], **style)
        goodput.plot(rates, [p.summary.goodput for p in mine], **style)
    attainment.set_ylim(0, 1.02)
    attainment.set_ylabel("SLO attainment")
    attainment.set_title("SLO attainment vs offered rate")
    goodput.set_ylim(bottom=0)
    goodput.set_ylabel("goodput (req/s within SLO)")
    goodput.set_title("Goodput vs offered rate")
    for ax in (attainment, goodput):
        ax.set_xlabel("offered rate (req/s, Poisson)")
        ax.grid(alpha=0.3)
    attainment.legend(loc="lower left")
    fig.savefig(path, dpi=100)
    return Path(path)
