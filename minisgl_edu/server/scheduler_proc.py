"""Chapters 1 and 8 — the scheduler process: the foundation's `Scheduler`, fed by ZMQ.

One process per TP rank. Only rank 0 has a mailbox (the tokenizers push to one address). Each
iteration rank 0 takes the raw bytes waiting there, broadcasts *how many* over the CPU group, and
re-publishes the bytes unchanged; ranks 1..N-1 read exactly that many. So every rank applies the
same messages in the same order, forms the same batch, and calls the same collectives — one ledger,
many ranks. Only rank 0 answers: tokens go to the detokenizer, the start-up ack to the launcher.

The loop: when the scheduler is idle, wait for mail (with a timeout, so shutdown is noticed);
otherwise take what is there without waiting, run one step, and send the new tokens.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext

import torch

from .. import tp
from ..messages import (AbortMsg, BatchTokenizerMsg, DetokenizeMsg, ExitMsg, StatsMsg, StatsReply, UserMsg, decode,
                        unbatch)
from .common import ServerConfig, exit_child, send_ack, setup_child, trace
from .metrics import SchedulerCounters
from .queues import Addresses, publisher, pull, push, subscriber

log = logging.getLogger("minisgl_edu")

IDLE_WAIT_MS = 200  # how long an idle rank 0 waits for mail before looking again
RANK_TIMEOUT_MS = 60_000  # how long rank k waits for bytes whose count rank 0 already announced


class RankIO:
    """Where this rank's messages come from, and (rank 0 only) where its answers go."""

    def __init__(self, rank: int, size: int, addrs: Addresses):
        self.rank, self.size = rank, size
        if rank == 0:
            self.inbox = pull(addrs.scheduler)
            self.to_detokenizer = push(addrs.detokenizer)
            self.to_ranks = publisher(addrs.ranks) if size > 1 else None
        else:
            self.from_rank0 = subscriber(addrs.ranks)

    def wait_for_ranks(self) -> None:
        """Rank 0 waits until every other rank has subscribed (a message published earlier would be lost)."""
        if self.rank == 0:
            for _ in range(self.size - 1):  # one subscription message per subscriber (XPUB_VERBOSE)
                if self.to_ranks.get_raw(RANK_TIMEOUT_MS) is None:
                    raise RuntimeError("a scheduler rank never subscribed to rank 0's messages")
        if self.size > 1:
            torch.distributed.barrier(group=tp.cpu_group())

    def receive(self, block: bool) -> list:
        raws: list[bytes] = []
        if self.rank == 0:
            first = self.inbox.get_raw(IDLE_WAIT_MS) if block else None
            raws = ([first] if first is not None else []) + self.inbox.drain_raw()
        if self.size > 1:
            count = tp.broadcast_count(len(raws))  # every rank learns how many
            if self.rank == 0:
                for raw in raws:
                    self.to_ranks.put_raw(raw)  # forwarded as received: never decoded and re-encoded
            else:
                raws = [self.from_rank0.get_raw(RANK_TIMEOUT_MS) for _ in range(count)]
                if any(r is None for r in raws):
                    raise RuntimeError("rank 0 announced messages that never arrived")
        return [m for raw in raws for m in unbatch(decode(raw))]

    def send(self, msgs: list) -> None:
        if self.rank == 0 and msgs:
            self.to_detokenizer.put(msgs[0] if len(msgs) == 1 else BatchTokenizerMsg(msgs))


def stats(sched, uid: int) -> StatsReply:
    integrity = "busy"
    if sched.idle:
        try:
            sched.check_integrity()
            integrity = "ok"
        except AssertionError as e:
            integrity = f"failed: {e}"
    pool = sched.pool
    return StatsReply(uid, pool.num_pages, pool.num_free_pages, sched.cache.size // pool.page_size, len(sched.live),
                      integrity)


def run_scheduler(rank: int, cfg: ServerConfig, addrs: Addresses, parent_pid: int) -> None:
    name = f"scheduler-rank{rank}"
    setup_child(name, parent_pid)
    try:
        if cfg.device == "cpu":
            # ranks share the cores, and one is left to the API and tokenizers: oversubscribed torch threads
            # spin-wait on each other (on 2 busy cores, 2 threads decode ~9x slower than 1)
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.tp - 1))
        from ..engine import EngineConfig
        from ..llm import eos_ids, load_tokenizer
        from ..scheduler import build_scheduler
        device = f"cuda:{rank}" if cfg.device == "cuda" else cfg.device
        tp.init_distributed(rank, cfg.tp, device, addrs.tp_init)
        # as the offline `LLM` builds them; every rank takes the same steps: rank 0's step trace stands for all
        sched = build_scheduler(EngineConfig(cfg.model_path, device, None, cfg.page_size, cfg.max_running_reqs,
                                             cfg.context_length, cfg.max_total_tokens, dummy_weights=cfg.dummy_weights,
                                             cuda_graph_max_bs=cfg.cuda_graph_max_bs),
                                cfg.max_prefill_tokens, cfg.cache, cfg.overlap,
                                eos_ids(cfg.model_path, None if cfg.skip_tokenizer_init
                                        else load_tokenizer(cfg.model_path, warn=False)),
                                (rank == 0 and cfg.step_trace_path) or None)
        io = RankIO(rank, cfg.tp, addrs)
        io.wait_for_ranks()
    except BaseException as e:
        if rank == 0:
            send_ack(addrs.ack, name, e)
        raise SystemExit(1)
    if rank == 0:  # the primary rank alone acks, and only once every rank is ready
        send_ack(addrs.ack, name)
    scheduler_loop(sched, io, cfg, name)
    exit_child(0)


def scheduler_loop(sched, io: RankIO, cfg: ServerConfig, name: str) -> None:
    ctx = sched.engine.max_seq_len
    prompt_len: dict[int, int] = {}  # uid -> prompt tokens, for the usage counts
    clamped: set[int] = set()  # uids whose first reply must carry the "max_tokens reduced" warning
    counters = SchedulerCounters()  # for /metrics: shipped as a SchedulerStats message now and then
    while True:
        replies = []
        busy = not sched.idle  # an idle receive is a wait for mail, not work: it is not traced
        with sched.tracer.span("receive") if sched.tracer and busy else nullcontext({}) as args:
            msgs = io.receive(block=not busy)
            args["messages"] = len(msgs)
        trace(cfg, name, "recv UserMsg", [m.uid for m in msgs if isinstance(m, UserMsg)])
        for msg in msgs:
            if isinstance(msg, UserMsg):
                ids = msg.input_ids.tolist()
                try:
                    req = sched.add_request(msg.uid, ids, msg.sampling_params)
                except ValueError as e:  # refused, never dropped: the client hears why
                    status = 413 if len(ids) >= ctx else 400  # 413: the prompt does not fit the context
                    replies.append(DetokenizeMsg(msg.uid, -1, True, "error", len(ids), error=str(e), status=status))
                    continue
                prompt_len[msg.uid] = req.prompt_len
                counters.queried += req.prompt_len
                if req.clamped:
                    clamped.add(msg.uid)
            elif isinstance(msg, AbortMsg):
                for out in sched.abort(msg.uid):
                    replies.append(DetokenizeMsg(out.uid, -1, True, "abort", prompt_len.pop(out.uid, 0)))
            elif isinstance(msg, StatsMsg):
                replies.append(stats(sched, msg.uid))
            elif isinstance(msg, ExitMsg):
                io.send(replies + [ExitMsg()])  # the detokenizer stops after our last words
                if sched.tracer is not None:
                    log.info("step trace: %s", sched.tracer.save())
                return
        if not sched.idle:
            t0 = time.perf_counter()
            outs = sched.step()
            counters.observe_step(sched, time.perf_counter() - t0)
            for out in outs:
                n = prompt_len.pop(out.uid, 0) if out.finished else prompt_len.get(out.uid, 0)
                replies.append(DetokenizeMsg(out.uid, out.token_id, out.finished, out.finish_reason, n,
                                             clamped=out.uid in clamped))
                clamped.discard(out.uid)
            if sched.idle:
                sched.check_integrity()  # every page is free or cached once nothing runs
        if io.rank == 0 and counters.due(time.monotonic(), not sched.idle, (busy or bool(msgs)) and sched.idle):
            replies.append(counters.message(sched))
        if io.rank == 0:
            trace(cfg, name, "send DetokenizeMsg", [r.uid for r in replies if isinstance(r, DetokenizeMsg)])
        io.send(replies)
