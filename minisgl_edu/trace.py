"""Chapter 6 — A step trace in Chrome/Perfetto trace-event format: where does each scheduler step spend its time?

`Tracer.attach(scheduler)` wraps `schedule`, `launch` and `process` in CPU spans; the forward's
device span comes from the engine's `Timeline`, the one record of step times (`bench.py` reads it too).
"""
from __future__ import annotations

import json
import os
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from typing import NamedTuple

import torch

CPU_TID, DEVICE_TID = 1, 2
# MINISGL_TRACE_DETAIL=1: the launch's own phases get spans too (assign_locations, prepare and its plans, the graph's
# replay, the LM head), nested in its span: where a served step's host time goes (issue 18). A few us each
DETAIL = os.environ.get("MINISGL_TRACE_DETAIL", "") == "1"


@dataclass
class StepStats:
    phase: str
    batch_size: int
    tokens: int  # tokens extended this step
    cache_hit_tokens: int  # prompt tokens served from the prefix cache (prefill steps)
    decode_rows: int = 0  # requests extending one sampled token: all of a decode step, some of a mixed one
    graph: bool | None = None  # it replayed a CUDA graph (Batch.in_graph); None until launched (its schedule span omits it)

    @classmethod
    def of(cls, batch) -> StepStats:
        rows = batch.decode_rows if batch.is_prefill else batch.size
        prompts = batch.reqs[rows:]  # a decode row extends one token and has no hit (matched_len < its cached_len)
        hit = sum(r.matched_len for r in prompts if r.cached_len == r.matched_len)
        phase = "mixed" if batch.is_prefill and rows else batch.phase  # a prefill step decode rows ride in
        return cls(phase, batch.size, rows + sum(r.extend_len for r in prompts), hit, rows)


class StepTime(NamedTuple):
    """When one forward ran on the CPU and on the device, in seconds of time.perf_counter."""
    cpu_start: float
    cpu_end: float
    device_start: float
    device_end: float


def _event() -> torch.cuda.Event:
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


class Timeline:
    """Engine.forward's record, one entry per step (`engine.timeline = Timeline(engine.device)`). On CUDA an
    entry's two events are placed on the CPU clock through one origin event, so recording adds no wait."""

    def __init__(self, device: torch.device, maxlen: int | None = None):
        self.entries: deque[tuple] = deque(maxlen=maxlen)  # (cpu start, cpu end, start event, end event)
        self.origin = _event() if torch.device(device).type == "cuda" else None
        if self.origin is not None:
            torch.cuda.synchronize(device)
            self.origin_s = time.perf_counter()

    @contextmanager
    def step(self):
        t0, start = time.perf_counter(), _event() if self.origin is not None else None
        yield
        self.entries.append((t0, time.perf_counter(), start, _event() if start is not None else None))

    def place(self, entry: tuple, wait: bool = True) -> StepTime | None:
        """One entry on the CPU clock; None while its device work runs, unless `wait`."""
        t0, t1, start, end = entry
        if start is None:  # the forward ran on the host
            return StepTime(t0, t1, t0, t1)
        if not wait and not end.query():
            return None
        end.synchronize()
        at = lambda e: self.origin_s + self.origin.elapsed_time(e) / 1e3
        return StepTime(t0, t1, at(start), at(end))

    def steps(self, first: int = 0) -> list[StepTime]:
        """Every step from `first` on (waits for the device)."""
        return [self.place(e) for e in list(self.entries)[first:]]


class Tracer:
    def __init__(self, path: str | None = None):
        self.path = path
        self.events: list[dict] = []
        self._pending: list[tuple[Timeline, tuple, dict]] = []  # forwards whose device work may still run
        self._step_args: dict[int, dict] = {}  # id(batch) -> its launch span's arguments, for its process span
        self._t0 = time.perf_counter()

    @contextmanager
    def span(self, name: str, **args):
        start = time.perf_counter()
        try:
            yield args  # the caller may add arguments (batch size, tokens, ...) while inside
        finally:
            self._add(name, start, time.perf_counter(), CPU_TID, args)

    # ---- the hook: the scheduler's three phases become spans ------------------------------------
    def attach(self, sched) -> None:
        """Trace `sched` (once): its instance attributes now shadow the class's schedule, launch and process."""
        sched.schedule = partial(self._schedule, sched, sched.schedule)
        sched.launch = partial(self._launch, sched, sched.launch)
        sched.process = partial(self._process, sched.process)
        if DETAIL:
            eng = sched.engine
            parts = [(sched.pool, "assign_locations"), (eng, "prepare"), (eng.backend, "prepare"), (eng.model, "logits")]
            parts += [(eng.backend, m) for m in ("plan", "_plan_decode") if hasattr(eng.backend, m)]
            parts += [(eng.graphs, m) for m in ("replay", "replay_prefill")] if eng.graphs is not None else []
            for owner, method in parts:
                name = f"{'backend.' if owner is eng.backend else ''}{method.lstrip('_')}"
                setattr(owner, method, partial(self._detail, name, getattr(owner, method)))

    def _detail(self, name, fn, *a, **kw):
        with self.span(name):
            return fn(*a, **kw)

    def _schedule(self, sched, schedule):
        with self.span("schedule") as args:
            batch = schedule()
            if batch is not None:  # not launched yet: its stats come next
                args.update(step=sched.steps_done, **asdict(StepStats.of(batch)))
        return batch

    def _launch(self, sched, launch, batch):
        engine = sched.engine
        if engine.timeline is None:  # the forward's device times: our own timeline, the latest entry only
            engine.timeline = Timeline(engine.device, maxlen=1)
        with self.span("launch") as args:
            tokens = launch(batch)
            args.update(step=sched.steps_done - 1, **asdict(sched.stats[-1]))
        self._pending.append((engine.timeline, engine.timeline.entries[-1], dict(args)))
        self._step_args[id(batch)] = args  # the overlap loop processes step N after launching N+1
        self.flush()
        return tokens

    def _process(self, process, batch, tokens):
        with self.span("process", **self._step_args.pop(id(batch), {})):
            return process(batch, tokens)

    # ---- events --------------------------------------------------------------------------------
    def _add(self, name: str, start: float, end: float, tid: int, args: dict) -> None:
        self.events.append({"name": name, "cat": "device" if tid == DEVICE_TID else "cpu", "ph": "X",
                            "ts": round((start - self._t0) * 1e6, 3), "dur": round((end - start) * 1e6, 3),
                            "pid": os.getpid(), "tid": tid,
                            "args": {k: v for k, v in args.items() if isinstance(v, (int, float, str, bool))}})

    def flush(self, wait: bool = False) -> None:
        """Turn the forwards whose device work has finished (all of them if `wait`) into device spans."""
        keep = []
        for timeline, entry, args in self._pending:
            t = timeline.place(entry, wait)
            if t is None:
                keep.append((timeline, entry, args))
            else:
                self._add("forward", t.device_start, t.device_end, DEVICE_TID, args)
        self._pending = keep

    def to_json(self) -> dict:
        self.flush(wait=True)
        meta = [{"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": t, "args": {"name": n}}
                for t, n in ((CPU_TID, "scheduler (CPU)"), (DEVICE_TID, "device"))]
        return {"traceEvents": meta + sorted(self.events, key=lambda ev: ev["ts"]), "displayTimeUnit": "ms"}

    def save(self, path: str | None = None) -> str:
        path = path or self.path
        with open(path, "w") as f:
            json.dump(self.to_json(), f)
        return path


def validate_trace(obj: dict) -> None:
    """Check the subset of the trace-event format we emit (complete 'X' and metadata 'M' events)."""
    assert isinstance(obj, dict) and isinstance(obj.get("traceEvents"), list), "needs a traceEvents list"
    for ev in obj["traceEvents"]:
        assert ev.get("ph") in ("X", "M"), ev
        assert isinstance(ev.get("name"), str) and isinstance(ev.get("pid"), int) and isinstance(ev.get("tid"), int)
        if ev["ph"] == "X":
            assert isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0, ev
            assert isinstance(ev.get("args", {}), dict)
