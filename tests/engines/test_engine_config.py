"""The hf engine's thread count for a replica (engines.config.HFEngineConfig.for_replica)."""

from __future__ import annotations

import os

from engines.config import GPU_ENGINE_MIN_THREADS, HFEngineConfig


def test_a_cpu_replica_gets_its_reserved_cpus_rounded_up():
    config = HFEngineConfig(model="builtin:tiny")
    assert config.for_replica(0.5, 0).num_threads == 1
    assert config.for_replica(2.0, 0).num_threads == 2
    assert config.for_replica(2.5, 0).num_threads == 3


def test_a_gpu_replica_gets_a_few_threads_even_with_one_cpu():
    config = HFEngineConfig(model="builtin:tiny")
    assert config.for_replica(1.0, 1).num_threads == min(GPU_ENGINE_MIN_THREADS, os.cpu_count() or 1)
    assert config.for_replica(32.0, 1).num_threads == 32  # a bigger reservation wins


def test_a_configured_thread_count_is_kept():
    config = HFEngineConfig(model="builtin:tiny", num_threads=3)
    assert config.for_replica(16.0, 1) is config
