"""Chapters 1 and 8 — a scheduler rank: the one process body behind `serve --tp N` and `LLM(tp=N)`.

How rank 0's mailbox feeds every rank is chapter 1's "Rank 0 alone has the mailbox". Rank 0 alone
answers for the ledger (tokens, refusals, stats, the start-up ack); every rank answers for itself to
chapter 8's `RecordMsg`/`ReportMsg` and when it fails (an `AckMsg` with the traceback). The loop
blocks on mail (with a timeout, so shutdown is noticed) only while the scheduler is idle. With one rank
and the overlap loop it also reads mail while it waits for a step's tokens (`receive_early`).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch

from .. import tp
from ..config import SchedulerConfig, ServerConfig, host_threads_for
from ..messages import (AbortMsg, BatchRecord, BatchTokenizerMsg, DetokenizeMsg, ExitMsg, RankReport, RecordMsg,
                        ReportMsg, StatsMsg, StatsReply, TokenColumns, UserMsg, decode, unbatch)
from ..scheduler import Scheduler, build_scheduler
from .common import exit_child, freeze_startup_objects, send_ack, setup_child, trace
from .metrics import SchedulerCounters
from .queues import Addresses, publisher, pull, push, subscriber

log = logging.getLogger("minisgl_edu")

IDLE_WAIT_MS = 200  # how long an idle rank 0 waits for mail before looking again
RANK_TIMEOUT_MS = 60_000  # how long rank k waits for bytes whose count rank 0 already announced


class RankIO:
    """This rank's end of the wires: the inbox `tp.receive` reads, and the one reply path."""

    def __init__(self, rank: int, size: int, addrs: Addresses, forward_lag_s: float = 0.0):
        self.rank, self.size, self.forward_lag_s = rank, size, forward_lag_s
        self.mailbox = pull(addrs.scheduler) if rank == 0 else subscriber(addrs.ranks)
        self.to_ranks = publisher(addrs.ranks) if rank == 0 and size > 1 else None
        self.replies = push(addrs.detokenizer)

    def wait_for_ranks(self) -> None:
        """Rank 0 waits until every other rank has subscribed (a message published earlier would be lost)."""
        for _ in range(self.size - 1 if self.rank == 0 else 0):  # one subscription message each (XPUB_VERBOSE)
            if self.to_ranks.get_raw(RANK_TIMEOUT_MS) is None:
                raise RuntimeError("a scheduler rank never subscribed to rank 0's messages")
        if self.size > 1:
            torch.distributed.barrier(group=tp.cpu_group())

    def take(self, block: bool) -> list[bytes]:
        first = self.mailbox.get_raw(IDLE_WAIT_MS) if block else None
        return ([first] if first is not None else []) + self.mailbox.drain_raw()

    def forward(self, raws: list[bytes]) -> None:
        if self.to_ranks is not None and raws:
            time.sleep(self.forward_lag_s)  # 0 but in chapter 8's demonstration of a slow link
            for raw in raws:
                self.to_ranks.put_raw(raw)

    def next(self) -> bytes:
        raw = self.mailbox.get_raw(RANK_TIMEOUT_MS)
        if raw is None:
            raise RuntimeError("rank 0 announced messages that never arrived")
        return raw

    def send(self, msgs: list) -> None:
        """Rank 0 answers for the ledger; every rank answers for itself (its live BatchRecords and RankReports)."""
        msgs = msgs if self.rank == 0 else [m for m in msgs if isinstance(m, (BatchRecord, RankReport))]
        if msgs:
            self.replies.put(msgs[0] if len(msgs) == 1 else BatchTokenizerMsg(msgs))


class BatchRecorder:
    """Wrap an engine's `forward` (and optionally its logits) to record every step it runs."""

    def __init__(self, engine, keep_logits: bool = False, on_record=None):
        self.on_record = on_record  # called with each record before its forward runs
        self.records: list[BatchRecord] = []
        self.logits: list[torch.Tensor] = []
        self.keep_logits = keep_logits
        forward = engine.forward

        def recording_forward(batch, *args, **kw):
            r = batch.reqs
            rec = BatchRecord(batch.phase, tuple(q.uid for q in r), tuple(q.cached_len for q in r),
                              tuple(q.extend_len for q in r), tuple(batch.out_loc.tolist()))
            self.records.append(rec)  # before the forward: a step that never finishes is still seen
            if self.on_record is not None:
                self.on_record(rec)
            tokens = forward(batch, *args, **kw)
            if tokens.is_cuda:  # the step may run on the engine's own stream: wait for it (a debugging aid)
                torch.cuda.synchronize(tokens.device)
            self.records[-1] = replace(rec, tokens=tuple(tokens.tolist()))
            return tokens

        def recording_logits(logits):  # the sampled rows' logits, however the step made them (a graph's head too)
            if self.keep_logits:
                self.logits.append(logits.detach().float().cpu())

        engine.forward = recording_forward  # an instance attribute shadows the method until detach()
        engine.logits_hook = recording_logits
        self.engine = engine

    def detach(self) -> None:
        """Stop recording: the engine's own method is back (no more host syncs per step)."""
        del self.engine.forward
        self.engine.logits_hook = None

    def take(self) -> tuple[list[BatchRecord], list[torch.Tensor]]:
        out = (self.records, self.logits)
        self.records, self.logits = [], []
        return out


def shard_shapes(model) -> dict[str, tuple[int, ...]]:
    """This rank's parameter shapes, for the first decoder layer and the vocabulary."""
    keep = ("layers.0.", "embed_tokens", "lm_head")
    return {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)
            if n.startswith(keep) and "norm" not in n}


@dataclass
class Rank:
    """One rank's loop state besides the scheduler's own ledger."""
    sched: Scheduler
    io: RankIO
    cfg: SchedulerConfig
    name: str
    recorder: BatchRecorder | None = None  # chapter 8: set by a RecordMsg
    counters: SchedulerCounters = field(default_factory=SchedulerCounters)  # /metrics: sent as SchedulerStats
    running: bool = True
    columns: bool = False  # a step's plain tokens as one TokenColumns (serve; not --naive-stream, not LLM(tp>1))
    early: deque = field(default_factory=deque)  # mail read while waiting, not handled yet (from the first non-UserMsg on)
    early_replies: list = field(default_factory=list)  # refusals of requests handled while waiting


def run_scheduler(rank: int, cfg: SchedulerConfig, addrs: Addresses, parent_pid: int) -> None:
    name = f"scheduler-rank{rank}"
    setup_child(name, parent_pid)
    try:
        if (threads := host_threads_for(cfg, torch.device(cfg.device).type, rank_process=True)) is not None:
            torch.set_num_threads(threads)  # the rule and its why: config.host_threads_for
        device = f"cuda:{rank}" if torch.device(cfg.device).type == "cuda" else cfg.device
        tp.init_distributed(rank, cfg.tp, device, addrs.tp_init, cfg.tp_timeout_s)
        # every rank takes the same steps: rank 0's step trace stands for all
        sched = build_scheduler(replace(cfg, device=device, trace=cfg.trace if rank == 0 else None), stats_kept=256)
        io = RankIO(rank, cfg.tp, addrs, cfg.forward_lag_s)
        io.wait_for_ranks()
    except BaseException as e:  # the launcher (or LLM) names this rank, with the traceback
        send_ack(addrs.ack, name, e)
        exit_child(1)
    # the model and its ledger stay: the collector need not walk them again (LLM(tp>1): Python's threshold)
    freeze_startup_objects(name, cfg.gc_threshold if isinstance(cfg, ServerConfig) else None)
    if rank == 0:  # the primary rank alone acks, and only once every rank is ready
        send_ack(addrs.ack, name)
    try:
        columns = isinstance(cfg, ServerConfig) and not cfg.naive_stream  # LLM(tp>1) reads DetokenizeMsgs itself
        st = Rank(sched, io, cfg, name, columns=columns)
        if isinstance(cfg, ServerConfig) and cfg.early_receive and cfg.tp == 1:  # ranks > 1: mail only at the top
            sched.while_waiting = lambda: receive_early(st)
        scheduler_loop(st)
    except BaseException as e:
        log.exception("%s failed", name)  # the server's log (the launcher has stopped reading acks)
        send_ack(addrs.ack, name, e)  # LLM(tp>1) raises RankFailed with it
        exit_child(1)
    exit_child(0)


def scheduler_loop(st: Rank) -> None:
    sched = st.sched
    while st.running:
        replies = []
        busy = not sched.idle  # an idle receive is a wait for mail, not work: it is not traced
        with sched.tracer.span("receive") if sched.tracer and busy else nullcontext({}) as args:
            msgs = [m for raw in tp.receive(st.io, not busy and not st.early, st.cfg.use_count) for m in unbatch(decode(raw))]
            args["messages"] = len(msgs)
        if st.early:  # read while waiting, older than what just came
            msgs[:0] = st.early
            st.early.clear()
        if st.cfg.hop_log:  # the hop log's lists cost a pass over every message: only when asked for
            trace(st.cfg, st.name, "recv UserMsg", [m.uid for m in msgs if isinstance(m, UserMsg)])
        for msg in msgs:
            if st.running:  # nothing after an ExitMsg counts
                replies += handle(st, msg)
        if st.running and not sched.idle:
            replies += step(st)
            replies += st.early_replies
            st.early_replies = []
        if st.io.rank == 0 and st.counters.due(time.monotonic(), not sched.idle, (busy or bool(msgs)) and sched.idle):
            replies.append(st.counters.message(sched))
        if st.io.rank == 0 and st.cfg.hop_log:
            trace(st.cfg, st.name, "send DetokenizeMsg", [u for r in replies for u in (
                r.uids if isinstance(r, TokenColumns) else [r.uid] if isinstance(r, DetokenizeMsg) else [])])
        st.io.send(replies)
    if sched.tracer is not None:
        log.info("step trace: %s", sched.tracer.save())


def receive_early(st: Rank) -> None:
    """The scheduler's `while_waiting` (one rank, overlap loop): read the mail while the GPU runs step N+1 and step
    N's tokens are on their way, where the host would only wait. A new request joins the queue at once, so its
    receive no longer delays the next step's launch (nor step N's tokens behind it); anything else waits, in order,
    for the loop's top: an abort handled now would release a row that step N+1, in flight, still writes."""
    if st.early or not st.io.mailbox.ready():  # something waits for the top already: what comes now queues behind it
        return
    sched = st.sched
    with sched.tracer.span("receive early") if sched.tracer else nullcontext({}) as args:
        st.early.extend(m for raw in st.io.mailbox.drain_raw() for m in unbatch(decode(raw)))
        users = []
        while st.early and isinstance(st.early[0], UserMsg):
            users.append(msg := st.early.popleft())
            st.early_replies += handle(st, msg)
        args["messages"] = len(users)
    if st.cfg.hop_log and users:
        trace(st.cfg, st.name, "recv UserMsg", [m.uid for m in users])


def handle(st: Rank, msg) -> list:
    """Apply one message (the same on every rank); return the replies it makes."""
    sched = st.sched
    if isinstance(msg, UserMsg):
        ids = msg.input_ids.tolist()
        try:
            req = sched.add_request(msg.uid, ids, msg.sampling_params)
        except ValueError as e:  # refused, never dropped: the client hears why
            status = 413 if len(ids) >= sched.engine.max_seq_len else 400  # 413: the prompt does not fit the context
            return [DetokenizeMsg(msg.uid, -1, True, "error", len(ids), error=str(e), status=status)]
        st.counters.queried += req.prompt_len
        return []
    if isinstance(msg, AbortMsg):
        outs = sched.abort(msg.uid)
        st.counters.forget(o.uid for o in outs)  # an abort ends a request outside any step's tokens
        return [DetokenizeMsg(o.uid, -1, True, "abort", o.prompt_len) for o in outs]
    if isinstance(msg, StatsMsg):
        return [stats(sched, msg.uid, st.counters)]
    if isinstance(msg, ExitMsg):  # the same step on every rank: nobody is left inside a collective
        st.running = False
        return [ExitMsg()]  # the detokenizer stops after our last words
    if isinstance(msg, RecordMsg):
        if st.recorder is not None:
            st.recorder.detach()
        live = (lambda rec: st.io.send([replace(rec, rank=st.io.rank)])) if msg.live else None
        st.recorder = None if msg.stop else BatchRecorder(sched.engine, msg.logits, live)
        return []
    if isinstance(msg, ReportMsg):
        return [report(st)]
    return []


def step(st: Rank) -> list:
    """One scheduler step; its tokens as DetokenizeMsgs (the plain ones as one TokenColumns when `st.columns`)."""
    t0 = time.perf_counter()
    outs = st.sched.step()
    st.counters.observe_step(st.sched, (now := time.perf_counter()) - t0)
    st.counters.observe_emit(now, [o.uid for o in outs if o.token_id >= 0], [o.uid for o in outs if o.finished])
    replies = token_replies(outs, st.columns, now)
    if st.sched.idle:
        st.sched.check_integrity()  # every page is free or cached once nothing runs
    return replies


def token_replies(outs: list, columns: bool, sent: float = 0.0) -> list:
    """A step's TokenOutputs as DetokenizeMsgs; with `columns` the plain ones (most) as one TokenColumns, first,
    stamped with when they were handed out (`sent`)."""
    replies, uids, tokens = [], [], []
    for o in outs:
        if columns and not o.finished and o.logprobs is None and not o.clamped:
            uids.append(o.uid)
            tokens.append(o.token_id)
        else:
            replies.append(DetokenizeMsg(o.uid, o.token_id, o.finished, o.finish_reason, o.prompt_len,
                                         clamped=o.clamped, logprobs=o.logprobs))
    return [TokenColumns(uids, tokens, sent)] + replies if uids else replies  # a step's uids are distinct: columns first


def report(st: Rank) -> RankReport:
    engine = st.sched.engine
    records, logits = st.recorder.take() if st.recorder else ([], [])
    return RankReport(st.io.rank, str(engine.device), shard_shapes(engine.model), records,
                      [t.reshape(-1) for t in logits], engine.vocab_size)


def stats(sched, uid: int, counters: SchedulerCounters) -> StatsReply:
    integrity = "busy"
    if sched.idle:
        try:
            sched.check_integrity()
            integrity = "ok"
        except AssertionError as e:
            integrity = f"failed: {e}"
    pool = sched.pool  # the counters, not sched.stats: that deque keeps only the latest steps
    return StatsReply(uid, pool.num_pages, pool.num_free_pages, sched.cache.size // pool.page_size, len(sched.live),
                      integrity, counters.prefill_tokens, counters.hits)
