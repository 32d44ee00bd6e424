"""What one simulated ingress knows of the replicas' prefix caches, as the serve app's routing table knows it.

The real ingress (``serve_app/routing.py``) keeps a :class:`router.prefix_index.PrefixIndex` per variant, fed at
each refresh with the cache changes the engine replicas posted to the stats board with their stats; here each
ingress applies, at its snapshot refresh, the changes each ready replica posted with its reports
(``SimReplica.kv_posted``), from its own cursor. ``oracle`` instead reads every replica's cache at the moment of
each decision: the routing an index with perfect, instant knowledge would do, the yardstick for the real one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engines.kv_blocks import reusable_tokens
from router.prefix_index import PrefixIndex
from sim.deployment import SimDeployment
from sim.replica import SimReplica


class SimPrefixView:
    def __init__(self, block_tokens: Mapping[str, int], *, oracle: bool = False) -> None:
        """``block_tokens``: the block size of each variant whose engines reuse prompt blocks."""
        self.oracle = oracle
        self.indexes = {name: PrefixIndex(size) for name, size in block_tokens.items()}
        self._cursors: dict[str, int] = {}

    def refresh(self, deployments: Mapping[str, SimDeployment]) -> None:
        """Applies what the ready replicas posted since this ingress's last refresh; forgets the others."""
        if self.oracle:
            return
        for name, index in self.indexes.items():
            ready = deployments[name].ready
            for replica in ready:
                posted = replica.kv_posted
                cursor = self._cursors.get(replica.replica_id, 0)
                for events in posted[cursor:]:
                    index.apply(replica.replica_id, events.stored, events.removed, cleared=events.cleared)
                self._cursors[replica.replica_id] = len(posted)
            index.retain({r.replica_id for r in ready})

    def cached(
        self, variant: str, replicas: Sequence[SimReplica], hashes: Sequence[int], prompt_tokens: int, now: float
    ) -> dict[str, int]:
        """Per ready replica holding any of the prompt, its cached tokens as this ingress sees them."""
        index = self.indexes.get(variant)
        if index is None or not hashes:
            return {}
        if not self.oracle:
            return index.cached_tokens(hashes, prompt_tokens, now)
        out = {}
        for replica in replicas:
            cache = replica.batch.cache
            if cache is not None:
                tokens = reusable_tokens(cache.matched_blocks(hashes), index.block_tokens, prompt_tokens)
                if tokens:
                    out[replica.replica_id] = tokens
        return out
