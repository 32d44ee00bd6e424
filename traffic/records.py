"""Per-request records: what one request measured, and the JSONL file they are kept in.

Times are seconds. ``start_s`` is measured from the start of the run on the load generator's
clock; every latency is measured from ``start_s``, which in an open loop is the moment the request
was due to go out, so client-side delays count against the system instead of hiding
(no coordinated omission).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


@dataclass(slots=True)
class RequestRecord:
    request_id: str  # sent as x-request-id
    index: int  # position in the workload
    start_time: float  # unix epoch seconds when the request was sent
    start_s: float  # seconds from the start of the run to the send
    arrival_s: float | None  # scheduled send offset (open loop); None in a closed loop
    prompt_tokens: int  # from usage when the server reports it, else the length sent
    max_tokens: int
    output_tokens: int = 0  # from usage when the server reports it, else content chunks counted
    chunks: int = 0  # SSE events that carried generated text
    ttft_s: float | None = None  # send -> first generated text
    itl_s: list[float] = field(default_factory=list)  # gaps between successive text chunks
    tpot_s: float | None = None  # (e2e - ttft) / (output_tokens - 1)
    e2e_s: float | None = None  # send -> end of stream (or the error)
    status: int | None = None  # HTTP status; None when no response came (connect error, timeout)
    error_type: str | None = None
    error_message: str | None = None
    slo_tier: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_met: bool = False
    variant: str | None = None  # response header x-route-variant: which engine variant served it
    route_reason: str | None = None  # response header x-route-reason: why the router chose it (or refused)
    # Response headers x-route-predicted-ttft-ms / -tpot-ms: the router's mean predictions for this request.
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    # Response header x-route-candidates: every variant the router weighed, with its figures (router.explain).
    route_candidates: str | None = None
    # Response header server-timing: the ingress's own work before dispatch, and dispatch to the first token
    # back at the ingress (what predicted_ttft_ms predicts). ttft_s less both is the path outside the ingress.
    server_ingress_ms: float | None = None
    server_engine_ms: float | None = None
    server_request_id: str | None = None  # response header x-request-id
    replica: str | None = None  # response header x-route-replica: the engine replica that served it (Serve's id)
    ingress: str | None = None  # response header x-route-ingress: the ingress replica that routed it
    # usage.prompt_tokens_details.cached_tokens: prompt tokens the engine took from its prefix cache (None: not said)
    cached_tokens: int | None = None
    turn: int = 0  # its conversation's turn, in a multi-turn workload (0 elsewhere)
    done: bool = False  # the stream ended with data: [DONE]
    cancelled: bool = False  # the client abandoned the stream on purpose (RequestSpec.cancel_after_chunks)

    @property
    def ok(self) -> bool:
        return self.error_type is None

    @property
    def end_s(self) -> float:
        return self.start_s + (self.e2e_s or 0.0)


def time_per_output_token(e2e_s: float | None, ttft_s: float | None, output_tokens: int) -> float | None:
    """Mean decode time per token after the first; None when fewer than two tokens came."""
    if e2e_s is None or ttft_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


def slo_met(record: RequestRecord) -> bool:
    """Succeeded and met every target it had; a request without targets only has to succeed.

    A TTFT target with no first token is missed; a TPOT target with one token (no TPOT) holds.
    """
    if not record.ok:
        return False
    if record.slo_ttft_ms is not None and (record.ttft_s is None or record.ttft_s * 1e3 > record.slo_ttft_ms):
        return False
    return not (
        record.slo_tpot_ms is not None and record.tpot_s is not None and record.tpot_s * 1e3 > record.slo_tpot_ms
    )


def write_jsonl(records: Iterable[RequestRecord], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(asdict(record)) + "\n")
    return path


_FIELDS = {f.name for f in fields(RequestRecord)}


def read_jsonl(path: str | Path) -> list[RequestRecord]:
    """Read records back; unknown keys (from a newer writer) are ignored."""
    with Path(path).open() as f:
        return [
            RequestRecord(**{k: v for k, v in json.loads(line).items() if k in _FIELDS}) for line in f if line.strip()
        ]
