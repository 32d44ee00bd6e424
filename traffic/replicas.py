"""Replicas over time: samples of each variant's replica count during a run, as the bench polls them from a
server (``bench/replicas.py``) and the simulator records them, and their ``replicas.jsonl`` file."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ReplicaSample:
    t_s: float  # seconds from the start of the run
    variant: str
    replicas: int


def write_samples(samples: Iterable[ReplicaSample], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w") as f:
        for sample in samples:
            f.write(json.dumps(asdict(sample)) + "\n")
    return path


def read_samples(path: str | Path) -> list[ReplicaSample]:
    with Path(path).open() as f:
        return [ReplicaSample(**json.loads(line)) for line in f if line.strip()]
