"""overlap_step that forgets deferred_rows: the rows of requests finished in flight are never given back.

EXPECT: still in deferred_rows
"""
from __future__ import annotations


def overlap_step(self) -> list:
    """One call of the overlap loop (Scheduler.step with self.overlap on). Return step N's TokenOutputs.

    1. batch = self.schedule() (None when there is nothing to run); if there is one, launch it:
       tokens = self.launch(batch) (step N+1 is queued; every ledger already advanced), and start
       its tokens on their way to the host: host, event = self.engine.to_host(tokens).
    2. The step launched by the previous call (self.in_flight: (batch, host tokens, event) or None)
       is now step N; the one just launched becomes self.in_flight. No step N: return [].
    3. Wait for step N's copy-done event (event.synchronize(); None on the CPU) — the only wait.
    4. Step N was the last to write the rows in self.deferred_rows: release them to the pool
       (self.pool.release_row) and clear the list. Not before: step N+1 may still write them.
    5. Return self.process(step N's batch, its host tokens as a list).
    (On CUDA the library runs all of this under torch.cuda.stream(self.stream); self.stream is None
    on the CPU.)"""
    import torch
    from contextlib import nullcontext
    with torch.cuda.stream(self.stream) if self.stream is not None else nullcontext():
        batch = self.schedule()
        launched = None
        if batch is not None:
            tokens = self.launch(batch)  # step N+1 is queued on the engine stream
            host, event = self.engine.to_host(tokens)
            launched = (batch, host, event)
        prev, self.in_flight = self.in_flight, launched
        if prev is None:
            return []
        batch_prev, host_prev, event_prev = prev
        if event_prev is not None:
            event_prev.synchronize()  # the copy-done event guards the CPU read
        return self.process(batch_prev, host_prev.tolist())
