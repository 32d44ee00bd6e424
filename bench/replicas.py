"""Replicas over time: samples of each variant's replica count, polled from the server's
``GET /variants`` (``{"variants": [{"name": ..., "replicas": N, ...}]}``) during a run.

The endpoint is this project's own; other servers lack it. The poller is therefore tolerant: a
target without it (any non-200 answer or no answer to the first poll) yields no samples and
no error, and a failed poll later on is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.client import Clock
from traffic.replicas import ReplicaSample, read_samples, write_samples

__all__ = [
    "ReplicaSample",
    "ReplicaStart",
    "parse_replica_starts",
    "parse_variants",
    "poll_variants",
    "read_samples",
    "replica_starts",
    "variants_url",
    "write_samples",
]


def parse_variants(payload: Any, t_s: float) -> list[ReplicaSample]:
    """The samples in one ``/variants`` answer; entries without a name or replica count are skipped."""
    variants = payload.get("variants") if isinstance(payload, dict) else None
    samples = []
    for entry in variants if isinstance(variants, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("replicas"), int):
            samples.append(ReplicaSample(t_s=t_s, variant=entry["name"], replicas=entry["replicas"]))
    return samples


def variants_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base.removesuffix("/v1") + "/variants"


async def poll_variants(
    client: httpx.AsyncClient,
    base_url: str,
    *,
    interval_s: float,
    stop: asyncio.Event,
    clock: Clock,
    run_start: float,
) -> list[ReplicaSample]:
    """Poll every ``interval_s`` until ``stop`` is set; the samples gathered (none if unsupported)."""
    url = variants_url(base_url)
    samples: list[ReplicaSample] = []
    first = True
    while not stop.is_set():
        try:
            response = await client.get(url, timeout=max(interval_s, 1.0))
            answer = parse_variants(response.json(), clock.now() - run_start) if response.status_code == 200 else None
        except (httpx.HTTPError, json.JSONDecodeError):
            answer = None
        if answer is None and first:
            return samples  # the server has no /variants: nothing to plot, not an error
        first = False
        samples.extend(answer or [])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
    return samples


@dataclass(frozen=True, slots=True)
class ReplicaStart:
    """One replica start as Serve's controller logged it."""

    wall_time: float  # when it was ready (epoch seconds, the log line's time)
    app: str
    deployment: str
    total_s: float  # from the controller's decision to start it until it was ready
    init_s: float | None  # of which the replica's constructor, reconfigure and first health check


# ray/serve/_private/deployment_state.py (2.60): "Replica(id='..', deployment='..', app='..') started successfully on
# node '..' after 12.3s (PID: 123). Replica constructor, reconfigure method, and initial health check took 4.5s."
_STARTED = re.compile(
    r"^\w+ (?P<date>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*deployment='(?P<deployment>[^']+)', app='(?P<app>[^']*)'\) "
    r"started successfully on node '[^']*' after (?P<total>[\d.]+)s.*?(?:took (?P<init>[\d.]+)s)?\.?$"
)


def parse_replica_starts(lines: Iterable[str]) -> list[ReplicaStart]:
    """The replica starts in Serve controller log lines (other lines are skipped)."""
    out = []
    for line in lines:
        match = _STARTED.match(line.strip())
        if match is None:
            continue
        stamp = datetime.strptime(match["date"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        init = float(match["init"]) if match["init"] else None
        out.append(ReplicaStart(stamp, match["app"], match["deployment"], float(match["total"]), init))
    return out


def replica_starts(serve_log_dir: str | Path) -> list[ReplicaStart]:
    """Every replica start the controller logs in ``serve_log_dir`` (a Ray session's ``logs/serve``) record."""
    starts: list[ReplicaStart] = []
    for path in sorted(Path(serve_log_dir).glob("controller_*.log")):
        with path.open(errors="replace") as f:
            starts += parse_replica_starts(f)
    return sorted(starts, key=lambda s: s.wall_time)
