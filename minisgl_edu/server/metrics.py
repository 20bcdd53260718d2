"""Chapter 9 — `/metrics`: what is the server doing right now, in the Prometheus text format?

The names, where each is measured and how the scheduler's numbers travel are chapter 9's `/metrics`
section. Observing is a `bisect` and two additions (`Histogram` below), cheap enough per token; the
Prometheus objects are built only when `/metrics` is scraped (prometheus_client itself is imported up front).
"""
from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import Counter
from itertools import islice
from dataclasses import dataclass, field

from .common import STALL_LOG_MS, RateLimited

log = logging.getLogger("minisgl_edu")

# bucket upper bounds (seconds), close to vLLM's
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
# 0.1 ms apart from 0.5 to 5 ms, where a GPU's decode intervals fall (a p99 from them: bench_serve.bench_serve_timed),
# then vLLM's
ITL_BUCKETS = tuple(round(0.0005 + 0.0001 * i, 4) for i in range(46)) + (0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
                                                                           0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                                                           0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0)
# 0.1 ms apart from 0.5 to 3 ms, where decode and mixed steps fall: fine enough for a median (bench_serve.step_median)
STEP_BUCKETS = tuple(round(0.0005 + 0.0001 * i, 4) for i in range(26)) + (0.004, 0.005, 0.0075, 0.01, 0.015, 0.02,
                                                                           0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
# a reply's hops (scheduler -> detokenizer -> API), 0.05 ms apart up to 2 ms, then coarser
HOP_BUCKETS = tuple(round(0.00005 * i, 5) for i in range(1, 41)) + (0.0025, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.025,
                                                                     0.05, 0.1, 0.25, 1.0)
HOPS = ("scheduler_to_detokenizer", "detokenizer", "detokenizer_to_api")


@dataclass
class Histogram:
    """Cumulative-free bucket counts (the last bucket is +Inf) and a sum: the shape Prometheus exports."""
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0

    def __post_init__(self):
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, v: float, n: int = 1) -> None:
        """n observations of v (n tokens that waited the same interval)."""
        self.counts[bisect_left(self.bounds, v)] += n  # bisect_left: v == bound falls in that bucket (le)
        self.sum += n * v


def import_exporter() -> bool:
    """Import prometheus_client, if installed (True), before the API serves: its import took ~30 ms of the API's event
    loop on the H200, and at the first scrape every stream would wait that long for its next token."""
    try:
        import prometheus_client.core  # noqa: F401
        import prometheus_client.registry  # noqa: F401
    except ImportError:
        return False
    return True


def histogram_family(name: str, doc: str, bounds, counts_by_label: dict[str, tuple[list[int], float]],
                     label: str | None = None):
    from prometheus_client.core import HistogramMetricFamily
    fam = HistogramMetricFamily(name, doc, labels=[label] if label else None)
    for value, (counts, total) in counts_by_label.items():
        acc, buckets = 0, []
        for b, c in zip(list(bounds) + [float("inf")], counts):
            acc += c
            buckets.append(("+Inf" if b == float("inf") else repr(float(b)), acc))
        fam.add_metric([value] if label else [], buckets, total)
    return fam


@dataclass
class Timing:
    start: float
    last: float = 0.0
    tokens: int = 0  # completion tokens seen so far


class ServerMetrics:
    """The API server's side: fed by Frontend.dispatch (every UserReply, every SchedulerStats)."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.ttft, self.itl, self.e2e = Histogram(TTFT_BUCKETS), Histogram(ITL_BUCKETS), Histogram(E2E_BUCKETS)
        self.prompt_tokens = self.generation_tokens = 0
        self.direct_writes = 0  # replies Frontend.dispatch wrote to their stream itself (api.py, Inbox.offer)
        self.hops = {h: Histogram(HOP_BUCKETS) for h in HOPS}  # a step's plain replies on their way here
        self.finished: dict[str, int] = {}  # finished_reason -> requests
        self.timing: dict[int, Timing] = {}  # uid -> its clock, from open() to its finished reply
        self.sched = None  # the latest SchedulerStats
        self.exporter = import_exporter()  # here, before the API serves, not at the first scrape
        self.stall_logged = RateLimited()

    def opened(self, uid: int) -> None:
        self.timing[uid] = Timing(time.perf_counter())

    def on_reply(self, r, now: float) -> None:
        t = self.timing.get(r.uid)
        if t is None:  # a stats reply, or a request we never timed
            return
        if r.error is None and r.completion_tokens > t.tokens:
            new = r.completion_tokens - t.tokens
            if t.tokens == 0:
                self.ttft.observe(now - t.start)
            else:
                gap = (now - t.last) / new  # several tokens in one reply share its gap
                for _ in range(new):
                    self.itl.observe(gap)
            self.generation_tokens += new
            t.tokens, t.last = r.completion_tokens, now
        if r.finished:
            del self.timing[r.uid]
            reason = r.finish_reason or "error"
            self.finished[reason] = self.finished.get(reason, 0) + 1
            self.prompt_tokens += r.prompt_tokens
            if reason != "error":
                self.e2e.observe(now - t.start)

    def forget(self, uid: int) -> None:
        self.timing.pop(uid, None)

    def on_hops(self, cols, now: float) -> None:
        """One step's ReplyColumns arrived at `now`: time each hop of its way (chapter 1's process map, as latency):
        scheduler -> detokenizer (the loop's rest, the pipe, the detokenizer's wake-up), the detokenizer's own work,
        detokenizer -> API (the pipe, and the API's loop getting round to it)."""
        if cols.sent and cols.detok_in and cols.detok_out:  # 0: not stamped (--naive-stream, another sender)
            ways = (cols.detok_in - cols.sent, cols.detok_out - cols.detok_in, now - cols.detok_out)
            for h, d in zip(HOPS, ways):
                self.hops[h].observe(max(d, 0.0))
            if STALL_LOG_MS > 0 and max(ways) * 1e3 > STALL_LOG_MS and self.stall_logged(now):
                log.warning("api: a step's replies (%d) waited %.1f ms in hop %s (hops %s ms)", len(cols.uids),
                            max(ways) * 1e3, HOPS[ways.index(max(ways))], " / ".join(f"{d * 1e3:.1f}" for d in ways))

    def collect(self):
        """prometheus_client's collector protocol: build the families from the numbers we keep."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        yield histogram_family("minisgl:time_to_first_token_seconds", "Time to first token.", self.ttft.bounds,
                               {"": (self.ttft.counts, self.ttft.sum)})
        yield histogram_family("minisgl:inter_token_latency_seconds", "Time between two output tokens.",
                               self.itl.bounds, {"": (self.itl.counts, self.itl.sum)})
        yield histogram_family("minisgl:e2e_request_latency_seconds", "Request arrival to its last token.",
                               self.e2e.bounds, {"": (self.e2e.counts, self.e2e.sum)})
        yield CounterMetricFamily("minisgl:prompt_tokens", "Prompt tokens of finished requests.",
                                  value=self.prompt_tokens)
        yield CounterMetricFamily("minisgl:generation_tokens", "Generated tokens.", value=self.generation_tokens)
        yield histogram_family("minisgl:reply_hop_seconds", "A step's replies on their way from the scheduler to the "
                               "API process, hop by hop (one observation per step).", HOP_BUCKETS,
                               {h: (self.hops[h].counts, self.hops[h].sum) for h in HOPS}, "hop")
        yield CounterMetricFamily("minisgl:sse_direct_writes", "Replies written to their stream by the API's receiver "
                                  "itself, without waking the request's task.", value=self.direct_writes)
        fam = CounterMetricFamily("minisgl:request_success", "Finished requests by finish reason.",
                                  labels=["finished_reason"])
        for reason, n in sorted(self.finished.items()):
            fam.add_metric([reason], n)
        yield fam
        s = self.sched
        if s is None:
            return
        for name, doc, v in (("num_requests_running", "Requests in the decode batch.", s.running),
                             ("num_requests_waiting", "Requests waiting for admission.", s.waiting),
                             ("kv_pages_total", "KV pages in the pool.", s.num_pages),
                             ("kv_pages_free", "KV pages on the free list.", s.free_pages),
                             ("kv_pages_evictable", "Cached KV pages no request holds.", s.evictable_pages),
                             ("kv_cache_usage_perc", "Share of KV pages held (not free, not evictable).",
                              1 - (s.free_pages + s.evictable_pages) / max(1, s.num_pages)),
                             ("cache_hit_rate", "Prefix-cache hit tokens / queried prompt tokens.",
                              s.prefix_hit_tokens / max(1, s.prefix_queried_tokens))):
            yield GaugeMetricFamily(f"minisgl:{name}", doc, value=v)
        yield CounterMetricFamily("minisgl:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                                  value=s.prefix_queried_tokens)
        yield CounterMetricFamily("minisgl:prefix_cache_hits", "Prompt tokens served by the prefix cache.",
                                  value=s.prefix_hit_tokens)
        yield histogram_family("minisgl:step_time_seconds", "Scheduler step time (schedule + forward + process).",
                               s.step_bounds, {p: (s.step_counts[p], s.step_sum[p]) for p in sorted(s.step_counts)},
                               "phase")
        fam = CounterMetricFamily("minisgl:steps_without_cuda_graph", "Steps that ran eagerly on a GPU with CUDA "
                                  "graphs: no captured graph held them (each stalls the decoding requests).",
                                  labels=["phase"])
        for phase, n in sorted(s.eager_steps.items()):
            fam.add_metric([phase], n)
        yield fam
        if s.emit_counts:
            yield histogram_family("minisgl:emit_interval_seconds", "Time between two of a request's tokens as the "
                                   "scheduler hands them out (before the detokenizer and the API).",
                                   s.emit_bounds, {"": (s.emit_counts, s.emit_sum)})

    def render(self) -> bytes:
        from prometheus_client import generate_latest
        from prometheus_client.registry import CollectorRegistry
        reg = CollectorRegistry(auto_describe=False)
        reg.register(self)
        return generate_latest(reg)


# ---- the scheduler's side ------------------------------------------------------------------------
STATS_INTERVAL_S = 0.5


@dataclass
class SchedulerCounters:
    """What scheduler rank 0 accumulates between SchedulerStats messages."""
    queried: int = 0
    hits: int = 0
    steps: dict[str, Histogram] = field(default_factory=dict)
    eager: dict[str, int] = field(default_factory=dict)  # phase -> steps that ran without a graph, where graphs exist
    prefill_tokens: int = 0  # tokens extended by prefill steps (StatsReply)
    seen_steps: int = 0  # steps launched, ever, that were counted
    next_send: float = 0.0
    # the interval between two emissions of a request's tokens, at the scheduler, once per token: the ITL as the
    # scheduler makes it, before the detokenizer and the API process (chapter 9, "A stopwatch at the socket")
    emit: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    last_emit: dict[int, float] = field(default_factory=dict)  # uid -> when its last token was handed out

    def observe_emit(self, now: float, uids: list[int], finished: list[int] = ()) -> None:
        """A step handed out one token each of `uids` at `now`: each waited since its request's previous token (a
        request's first token is its TTFT, no interval; a prefill step without decode rows skips the running ones,
        so "since the previous emission" would be wrong). `finished` requests have no next token."""
        last = self.last_emit
        waits = Counter(now - t for u in uids if (t := last.get(u)) is not None)  # most share one previous step
        for wait, n in waits.items():
            self.emit.observe(wait, n)
        last.update(dict.fromkeys(uids, now))
        for u in finished:
            last.pop(u, None)

    def forget(self, uids) -> None:
        """Requests that ended (finished, or aborted outside a step): no next token to time."""
        for u in uids:
            self.last_emit.pop(u, None)

    def observe_step(self, sched, seconds: float) -> None:
        """One loop step took `seconds`; attribute it to the phase of the batch it launched (if any).
        sched.stats keeps the latest steps (a bounded deque in a server rank); steps_done counts them all."""
        new = list(islice(reversed(sched.stats), sched.steps_done - self.seen_steps))[::-1]  # no copy of them all
        graphs = sched.engine.graphs is not None  # without graphs every step is eager: nothing to count
        for s in new:
            self.hits += s.cache_hit_tokens
            self.prefill_tokens += s.tokens - s.decode_rows  # a mixed step's prompt tokens count too
            if graphs and s.graph is False:
                self.eager[s.phase] = self.eager.get(s.phase, 0) + 1
        if new:
            self.steps.setdefault(new[-1].phase, Histogram(STEP_BUCKETS)).observe(seconds)
        self.seen_steps = sched.steps_done

    def message(self, sched):
        from ..messages import SchedulerStats
        pool, cache = sched.pool, sched.cache
        return SchedulerStats(len(sched.running), len(sched.pending), pool.num_pages, pool.num_free_pages,
                              cache.evictable_size // pool.page_size, self.queried, self.hits, list(STEP_BUCKETS),
                              {p: list(h.counts) for p, h in self.steps.items()},
                              {p: h.sum for p, h in self.steps.items()}, list(ITL_BUCKETS), list(self.emit.counts),
                              self.emit.sum, dict(self.eager))

    def due(self, now: float, busy: bool, became_idle: bool) -> bool:
        """Send now? Every STATS_INTERVAL_S while busy, and once when the scheduler turns idle."""
        if became_idle or (busy and now >= self.next_send):
            self.next_send = now + STATS_INTERVAL_S
            return True
        return False
