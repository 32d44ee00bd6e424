"""Does learning TPOT at the 16-token checkpoint explain slo's drift below the simulator (session 15)?

The real ingress teaches each request's TPOT twice (serve_app/pipeline.py): at the message that brings its 16th
token (``InflightBook.progress``: the window since its first token) and at its end (the rest). The simulator
teaches it once, over the whole decode, at the end. A 15-token window right after a request's prefill varies far
more than a whole decode's mean, and both are scored against the same decision-time prediction, so the real stack's
TPOT error margins (the 97th percentile of measured / predicted) should come out wider; a wider margin judges the
slow variant less often sure to meet a standard request's TPOT target, and those go to the fast variant instead.
This runs the two_variant fleet at capacity as the simulator runs it, and with the checkpoint taught as the real
ingress teaches it (at the exact time of the 16th token; the real one comes with the next message, up to a stream
interval later). ``--margins`` also prints the TPOT margins each side ended with.

    PYTHONPATH=. python results/routing-fleet/sim-drift-s15/checkpoint.py [duration_s] [scenario ...]

With scenarios named (``sim.scenario.SCENARIOS``), it prints slo's attainment with and without the checkpoint on
each, at its capacity, instead (is the checkpoint worth keeping at all?).
"""

from __future__ import annotations

import sys

import capacity  # this folder's shared fleet run (the script's folder is on sys.path)

from router.inflight import TPOT_CHECKPOINT_TOKENS
from sim.simulator import Simulation


class CheckpointedSimulation(Simulation):
    """The simulator with each request's TPOT taught at its checkpoint too, as the real ingress does."""

    def _step_end(self, replica, now):
        if not getattr(replica, "teaches_checkpoints", False):
            step_end = replica.step_end

            def with_checkpoints(at):
                before, start, dt = replica.steps, replica._seg_start, replica._seg_dt
                decoding = [entry[0:3:2] for entry in replica.decoding]  # (finish step, request) before this end
                result = step_end(at)
                overhead_s = replica.profile.overhead_ms / 1e3
                for finish_step, request in decoding:
                    ticket = request.ticket
                    if ticket is None or not ticket.checkpoint:
                        continue
                    # Tokens at step s: s - finish_step + max_tokens (one per iteration, the first at its prefill).
                    crossing = finish_step - request.max_tokens + ticket.checkpoint
                    if before < crossing <= replica.steps:
                        self.book.progress(ticket, ticket.checkpoint, start + (crossing - before) * dt + overhead_s)
                return result

            replica.step_end = with_checkpoints
            replica.teaches_checkpoints = True
        return super()._step_end(replica, now)


def run(policy: str, duration_s: float, checkpoints: bool, scenario_name: str = "two_variant"):
    return capacity.run(CheckpointedSimulation if checkpoints else Simulation, policy, duration_s, scenario_name)


def summary(records, sim) -> str:
    margins = ", ".join(
        f"{name} {100 * model.tpot_margin_for(4000):.0f}% / {100 * model.tpot_margin_for(500):.0f}%"
        for name, model in sim.models.items()
    )
    return capacity.summary(records, f"; TPOT margins at 4k / 500-token prompts: {margins}")


def main() -> None:
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 150.0
    if len(sys.argv) > 2:
        for name in sys.argv[2:]:
            plain, with_checkpoints = (run("slo", duration_s, c, name)[0] for c in (False, True))
            rates = [100 * sum(r.slo_met for r in records) / len(records) for records in (plain, with_checkpoints)]
            print(f"{name}: slo {rates[0]:.1f}% learning TPOT at the end only, {rates[1]:.1f}% with the checkpoint")
        return
    print(f"checkpoint at {TPOT_CHECKPOINT_TOKENS} tokens")
    for policy in ("slo", "length_threshold"):
        print(f"{policy}: simulator {summary(*run(policy, duration_s, False))}")
        print(f"{policy}: with the checkpoint taught {summary(*run(policy, duration_s, True))}")


if __name__ == "__main__":
    main()
