"""A step trace in Chrome/Perfetto trace-event format: where does each scheduler step spend its time?

`Tracer.span("schedule")` times a CPU span; `Tracer.device_span("forward")` times device work with
CUDA events (resolved lazily, so tracing adds no synchronisation inside a step). Open the JSON that
`save()` writes in https://ui.perfetto.dev or chrome://tracing.
"""
from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager

import torch

CPU_TID, DEVICE_TID = 1, 2


class Tracer:
    def __init__(self, path: str | None = None):
        self.path = path
        self.events: list[dict] = []
        self._pending: list[tuple[torch.cuda.Event, torch.cuda.Event, str, dict]] = []
        self._t0_ns = time.perf_counter_ns()
        self._lock = threading.Lock()
        self._cuda_origin: torch.cuda.Event | None = None

    def _us(self, ns: int) -> float:
        return (ns - self._t0_ns) / 1000.0

    @contextmanager
    def span(self, name: str, **args):
        start = time.perf_counter_ns()
        try:
            yield args  # the caller may add arguments (batch size, tokens, ...) while inside
        finally:
            end = time.perf_counter_ns()
            self._add(name, self._us(start), (end - start) / 1000.0, CPU_TID, args)

    @contextmanager
    def device_span(self, name: str, device: torch.device, **args):
        """Time the work enqueued inside on the current CUDA stream; on the CPU a plain span."""
        if device.type != "cuda":
            with self.span(name, **args) as a:
                yield a
            return
        self._place_device_clock()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        yield args
        e.record()
        self._pending.append((s, e, name, args))

    def timeline_span(self, name: str, entry: tuple, **args) -> None:
        """A device span from one `Engine.timeline` entry (cpu start, cpu end, start event, end event).
        On the CPU there are no events: the forward ran on the host, so its CPU times are the device's."""
        t0, t1, start, end = entry
        if start is None:
            self._add(name, self._us(round(t0 * 1e9)), (t1 - t0) * 1e6, DEVICE_TID, args)
            return
        self._place_device_clock()
        self._pending.append((start, end, name, args))

    def _place_device_clock(self) -> None:
        if self._cuda_origin is None:  # pair one event with the host clock to place device spans
            self._cuda_origin = torch.cuda.Event(enable_timing=True)
            self._cuda_origin.record()
            torch.cuda.synchronize()
            self._origin_us = self._us(time.perf_counter_ns())

    def _add(self, name: str, ts: float, dur: float, tid: int, args: dict) -> None:
        with self._lock:
            self.events.append({"name": name, "cat": "device" if tid == DEVICE_TID else "cpu", "ph": "X",
                                "ts": round(ts, 3), "dur": round(dur, 3), "pid": os.getpid(), "tid": tid,
                                "args": {k: v for k, v in args.items() if isinstance(v, (int, float, str, bool))}})

    def flush(self) -> None:
        """Resolve finished device spans into events (only those whose end event has completed)."""
        if not self._pending:
            return
        keep = []
        for s, e, name, args in self._pending:
            if e.query():
                ts = self._origin_us + self._cuda_origin.elapsed_time(s) * 1000.0
                self._add(name, ts, s.elapsed_time(e) * 1000.0, DEVICE_TID, args)
            else:
                keep.append((s, e, name, args))
        self._pending = keep

    def to_json(self) -> dict:
        if self._pending:
            torch.cuda.synchronize()
            self.flush()
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
