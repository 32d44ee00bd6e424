"""The spike bench's scenario in virtual time: the same fleet, trace, router and scaling code as ``bench spike``.

``bench spike`` deploys a :class:`~sim.spike_fleet.SpikeFleet` through real Serve; :func:`simulate_spike`
runs the same description here (the emulated engine's profile, the production router and autoscaling policy,
Serve's delays mirrored by :mod:`sim.autoscaler`), on the same seeded requests, and returns what the bench's
client and replica poller would have recorded, so that one report function scores both.

What the simulator cannot know is how long Serve takes to start a replica process on a given machine beyond
the engine's own cold start (a Ray worker, imports, the engine's start). Two ways to give it: ``extra_startup_s``
adds the same time to every start; ``process_starts`` (:class:`~sim.replica_starts.ProcessStarts`, what the bench
fits to a real run's measured starts) queues each new replica's worker process on the node as Ray does, a few at
a time, so that the replicas of one scale-up arrive one after another, as they did.
"""

from __future__ import annotations

from router import RouterConfig
from router.serve_autoscaling import AutoscalingSpec
from sim.deployment import SimDeployment
from sim.replica import SimReplica
from sim.replica_starts import ProcessStarts
from sim.seed import router_seed
from sim.simulator import Simulation, SimVariant
from sim.spike_fleet import Mode, SpikeFleet, workload
from sim.workload import Stream, sim_requests
from traffic.arrivals import SpikeShape
from traffic.records import RequestRecord
from traffic.replicas import ReplicaSample


def sim_variants(fleet: SpikeFleet, mode: Mode, extra_startup_s: float = 0.0) -> list[SimVariant]:
    """The fleet's variants as the simulation runs them under ``mode``."""
    out = []
    for v in fleet.variants:
        profile = v.profile(fleet.startup_time_scale, extra_startup_s)
        spec = None if mode == "fixed" else AutoscalingSpec.model_validate(fleet.autoscaling(v, mode))
        out.append(
            SimVariant(
                name=v.name,
                profile=profile,
                quality=v.quality,
                cost_per_1k_tokens=v.cost_per_1k_tokens,
                max_ongoing_requests=v.max_ongoing_requests,
                num_replicas=v.max_replicas if spec is None else v.min_replicas,
                autoscaling=spec,
                latency_profile=router_seed(profile, fleet.output_tokens),
            )
        )
    return out


class _QueuedStartDeployment(SimDeployment):
    """A deployment whose new replicas wait for a worker process from the node's shared start queue, then run
    their engine's cold start (the profile's ``startup_s``). The replicas deployed before the trace (t = 0) are
    up when it starts, as ``serve.run`` returns only once they run."""

    def __init__(self, base: SimDeployment, starts: ProcessStarts) -> None:
        super().__init__(base.name, base.profile, base.max_ongoing_requests, replica_choice=base.replica_choice)
        self._rng = base._rng  # the same replica choices as the deployment it replaces
        self._starts = starts

    def add_replica(self, now: float) -> SimReplica:
        replica = super().add_replica(now)
        if now > 0:
            replica.ready_s = self._starts.process_ready_s(now) + self.profile.startup_s
        return replica


def simulate_spike(
    fleet: SpikeFleet,
    shape: SpikeShape,
    duration_s: float,
    mode: Mode,
    *,
    seed: int = 0,
    extra_startup_s: float = 0.0,
    process_starts: ProcessStarts | None = None,
) -> tuple[list[RequestRecord], list[ReplicaSample]]:
    """One mode's run of the trace: the records and replica samples the bench would have gathered.

    ``process_starts``: the node's worker-process start queue (fresh for each call; it keeps state); every variant
    shares it, as every replica of the bench's one-node cluster does.
    """
    router = RouterConfig.model_validate(fleet.router())
    sim = Simulation(sim_variants(fleet, mode, extra_startup_s), router, seed=seed, tick_s=0.1)
    if process_starts is not None:
        sim.deployments = {name: _QueuedStartDeployment(d, process_starts) for name, d in sim.deployments.items()}
    stream = Stream(name="spike", arrivals=shape, workload=workload(fleet, seed))
    result = sim.run(sim_requests([stream], duration_s, router), horizon_s=duration_s)
    return sorted(result.records, key=lambda r: r.index), result.replica_samples
