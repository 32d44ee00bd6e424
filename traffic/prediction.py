"""How well the router predicted what each request then measured, from the records' x-route-predicted-* headers.

The SLO policy stands on its latency models: a variant is chosen because its predicted TTFT and TPOT meet the
request's targets. The ratio measured / predicted, per variant, says how far to trust those choices on a real
run: a median near 1 is an unbiased model, a high p90 the error margin the policy has to learn and hedge.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from traffic.records import RequestRecord


class RatioStats(BaseModel):
    """Measured / predicted over the requests that have both."""

    count: int
    p50: float | None = Field(description="Median ratio; above 1: the model was optimistic.")
    p90: float | None


class PredictionAccuracy(BaseModel):
    """One variant's predictions against the outcomes of the requests it served."""

    ttft: RatioStats = Field(description="The client's TTFT / the predicted TTFT.")
    tpot: RatioStats
    server_ttft: RatioStats = Field(
        default_factory=lambda: RatioStats(count=0, p50=None, p90=None),
        description="The ingress's TTFT, arrival to first token (server-timing 'ingress' + 'engine'), / the "
        "predicted TTFT: the quantity the router's model learns and predicts, so its own error.",
    )
    ingress_ms_p50: float | None = Field(None, description="Median server-timing 'ingress': work before dispatch.")
    path_ms_p50: float | None = Field(
        None, description="Median client TTFT less the server-timing total: the proxy both ways and the network."
    )


def ratio_stats(pairs: Sequence[tuple[float, float]]) -> RatioStats:
    """``(measured, predicted)`` pairs; pairs with a non-positive prediction carry no ratio and are skipped."""
    ratios = sorted(measured / predicted for measured, predicted in pairs if predicted > 0)
    if not ratios:
        return RatioStats(count=0, p50=None, p90=None)
    p90 = ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))]
    return RatioStats(count=len(ratios), p50=statistics.median(ratios), p90=p90)


def prediction_accuracy(records: Sequence[RequestRecord]) -> dict[str, PredictionAccuracy]:
    """Per variant that served requests with predictions: measured / predicted TTFT and TPOT."""
    out: dict[str, PredictionAccuracy] = {}
    for variant in sorted({r.variant for r in records if r.variant is not None}):
        served = [r for r in records if r.variant == variant and r.ok]
        ttft = [(r.ttft_s * 1e3, r.predicted_ttft_ms) for r in served if r.ttft_s is not None and r.predicted_ttft_ms]
        tpot = [(r.tpot_s * 1e3, r.predicted_tpot_ms) for r in served if r.tpot_s is not None and r.predicted_tpot_ms]
        server = [
            (r.server_ingress_ms + r.server_engine_ms, r.predicted_ttft_ms)
            for r in served
            if r.server_ingress_ms is not None and r.server_engine_ms is not None and r.predicted_ttft_ms
        ]
        # (client TTFT, ingress, engine) in ms, where the server said where its part of the time went.
        timed = [
            (r.ttft_s * 1e3, r.server_ingress_ms, r.server_engine_ms)
            for r in served
            if r.ttft_s is not None and r.server_ingress_ms is not None and r.server_engine_ms is not None
        ]
        if ttft or tpot:
            out[variant] = PredictionAccuracy(
                ttft=ratio_stats(ttft),
                tpot=ratio_stats(tpot),
                server_ttft=ratio_stats(server),
                ingress_ms_p50=_median([ingress for _, ingress, _ in timed]),
                path_ms_p50=_median([client - ingress - engine_ms for client, ingress, engine_ms in timed]),
            )
    return out


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
