"""Every candidate a routing decision weighed, as one response header (``x-route-candidates``).

``x-route-predicted-ttft-ms`` / ``-tpot-ms`` say what the router expected of the variant it chose. To see why a
request went where it did (and why the real stack and the simulator route the same request differently), what it
expected of the others matters as much: each candidate's mean TTFT and TPOT, the conservative figures the SLO was
judged on (the means inflated by the learned error margin), the prefill work it saw ahead, and whether it met the
SLO. The ingress sends it with every routed response and the simulator writes the same text into its records, so
both sides of a ``bench routing`` run can be compared decision by decision.

Format: ``; ``-separated candidates, each a name and ``key=value`` figures (ms, tokens):

    llama-8b-int4 ttft=213 ttft_up=340 tpot=23.7 tpot_up=30.1 ahead=5120 slot=0.0 slowdown=1.12 met=1; ...

Per request, not per token: a few floats formatted once when the decision is made.
"""

from __future__ import annotations

from collections.abc import Mapping

from router.types import Prediction

HEADER = "x-route-candidates"


def candidates_header(predictions: Mapping[str, Prediction]) -> str:
    """The header's value for a decision's ``predictions`` (empty when it had none)."""
    return "; ".join(
        f"{name} ttft={p.ttft_ms:.0f} ttft_up={p.ttft_upper_ms:.0f} tpot={p.tpot_ms:.1f} "
        f"tpot_up={p.tpot_upper_ms:.1f} ahead={p.queued_tokens_ahead:.0f} slot={p.waiting_for_slot:.1f} "
        f"slowdown={p.slowdown:.2f} cached={p.cached_tokens} met={int(p.meets_slo)}"
        for name, p in predictions.items()
    )


def parse_candidates(value: str | None) -> dict[str, dict[str, float]]:
    """The header back as ``{variant: {figure: value}}``; figures that do not parse are left out."""
    candidates: dict[str, dict[str, float]] = {}
    for part in (value or "").split(";"):
        words = part.split()
        if len(words) < 2:
            continue
        name, figures = words[0], words[1:]
        parsed = {}
        for figure in figures:
            key, _, text = figure.partition("=")
            try:
                parsed[key] = float(text)
            except ValueError:
                continue
        candidates[name] = parsed
    return candidates
