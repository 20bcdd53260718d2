"""Chapter 6: one call of the overlap loop, inside the real engine (overlap on, on the CPU)."""
from __future__ import annotations

from contextlib import contextmanager

from .. import Wrong
from ..oracle import Case, compare, reference, run_case
from ..swap import swapped


@contextmanager
def _watch(log: list):
    """Record launch/process order and check every take_row against the rows the step in flight writes."""
    from ...paging import PagePool
    from ...scheduler import Scheduler
    launch, process, take_row = Scheduler.launch, Scheduler.process, PagePool.take_row
    state = {"sched": None, "rows_in_flight": {}}

    def my_launch(self, batch):
        state["sched"] = self
        batch.grade_seq = len(state["rows_in_flight"])  # ids of dead batches are reused: number them instead
        log.append(("launch", batch.grade_seq))
        out = launch(self, batch)
        state["rows_in_flight"][batch.grade_seq] = {r.table_idx for r in batch.reqs}
        return out

    def my_process(self, batch, tokens):
        log.append(("process", getattr(batch, "grade_seq", -1)))
        if self.overlap and self.deferred_rows:  # the library's loop released them after the previous step's copy
            raise Wrong(f"rows {sorted(self.deferred_rows)} of requests that finished while a step was in flight "
                        f"are still in deferred_rows when step {log[-1][1]} is processed: release them once the "
                        f"step that wrote them is done")
        return process(self, batch, tokens)

    def my_take_row(self):
        row = take_row(self)
        s = state["sched"]
        if s is not None and s.in_flight is not None and row in state["rows_in_flight"].get(getattr(s.in_flight[0], "grade_seq", -1), ()):
            raise Wrong(f"page-table row {row} was handed to a new request while the step in flight still writes "
                        f"a token into it (release deferred_rows only after that step's copy is done)")
        return row

    Scheduler.launch, Scheduler.process, PagePool.take_row = my_launch, my_process, my_take_row
    try:
        yield
    finally:
        Scheduler.launch, Scheduler.process, PagePool.take_row = launch, process, take_row


def _order(log: list) -> list[str]:
    return [f"{k} step {b}" for k, b in log]


def _eos_case() -> Case:
    """Overlap on; the EOS token is one the library samples early for some request, so that request stops
    while the next step (which already holds it) is in flight."""
    plain = reference(Case(1, 32, 1024, 4, overlap=True, max_tokens=6))
    eos = next(t[1] for t in plain.tokens if len(t) > 2)
    return Case(1, 32, 1024, 4, overlap=True, max_tokens=6, eos=(eos,))


def grade_overlap_step(ex, path, module) -> None:
    cases = [_eos_case(), Case(4, 16, 256, 4, overlap=True, max_tokens=6)]
    for case in cases:
        ref_log, my_log = [], []
        reference(case)  # computed (and cached) outside the watch below
        with _watch(ref_log):
            run_case(case)  # the library's loop, watched the same way
        with swapped([ex], lambda e: path), _watch(my_log):
            compare(case, "overlap_step")
        a, b = _order(my_log), _order(ref_log)
        if a != b:
            k = next(i for i, (x, y) in enumerate(zip(a + ["(nothing)"], b + ["(nothing)"])) if x != y)
            raise Wrong(f"your loop's call sequence differs at call {k}: it did '{(a + ['nothing'])[k]}' where the "
                        f"overlap loop does '{(b + ['nothing'])[k]}' (launch step N+1 first, then process step N; "
                        f"case {case.describe()})")
