"""The stats board's record of each engine replica's prefix cache: its blocks, and its recent changes by number.

Engine replicas post what their cache stored and removed (``engines.kv_blocks.KvEvents``) with their stats, a few
times a second; every ingress replica reads, at its own refresh, only what changed since the change it last
applied (its cursor), so that a busy cache costs each reader its changes, not its whole contents. A reader whose
cursor is older than the kept changes (a new ingress, one that fell behind, a board that restarted) gets the
replica's whole block set once, as a cleared batch.
"""

from __future__ import annotations

from collections import deque

from engines.kv_blocks import KvEvents

KEPT_CHANGES = 64  # batches kept per replica: 16 s of posts at 4 a second


class KvLog:
    """One replica's blocks and its last :data:`KEPT_CHANGES` batches, numbered from 1."""

    def __init__(self) -> None:
        self.blocks: set[int] = set()
        self.seq = 0
        self._changes: deque[tuple[int, KvEvents]] = deque(maxlen=KEPT_CHANGES)

    def add(self, events: KvEvents) -> None:
        if not events:
            return
        events.apply_to(self.blocks)
        self.seq += 1
        self._changes.append((self.seq, events))

    def since(self, cursor: int) -> tuple[int, KvEvents] | None:
        """``(the latest number, what changed after cursor)``; None when nothing did."""
        if cursor == self.seq:
            return None
        changes = self._changes
        if cursor > self.seq or not changes or cursor < changes[0][0] - 1:
            return self.seq, KvEvents(stored=set(self.blocks), cleared=True)
        merged = KvEvents()
        for seq, events in changes:
            if seq > cursor:
                merged.extend(events)
        return self.seq, merged
