"""overlap_step that processes step N before launching step N+1: the normal loop in disguise.

EXPECT: launch step N+1 first
"""
from __future__ import annotations


def overlap_step(self) -> list:
    out = []
    prev, self.in_flight = self.in_flight, None
    if prev is not None:
        batch_prev, host_prev, event_prev = prev
        if event_prev is not None:
            event_prev.synchronize()
        for row in self.deferred_rows:
            self.pool.release_row(row)
        self.deferred_rows.clear()
        out = self.process(batch_prev, host_prev.tolist())
    batch = self.schedule()
    if batch is not None:
        tokens = self.launch(batch)
        host, event = self.engine.to_host(tokens)
        self.in_flight = (batch, host, event)
    return out
