"""Chapter 8 — TP: one ledger, many ranks. How do N ranks, each deciding on its own, reach the same
decision every step?

Only the weights are split (see `model/layers.py`); the *decisions* are not shared at all. Every
rank runs its own copy of the same scheduler, and the ranks agree because each one is fed the same
messages in the same steps. Rank 0 alone has the mailbox: it decides how many messages this step
takes and broadcasts that count over the CPU group; every other rank then reads exactly that many
from its own copy of the stream (`receive`). Same inputs + same deterministic code = same batch,
same page allocations, same evictions on every rank, with no scheduler state ever sent.

This module holds, in order:

* the rank identity (`DistributedInfo`) and the collectives the sharded layers need
  (`all_reduce` after a row-parallel layer, `all_gather_last_dim` for vocab-sharded logits);
* the control-plane collectives (`broadcast_count`, `broadcast_object`, `min_over_ranks`) that
  travel over a gloo group on the host, never through the GPU stream;
* `BatchRecord`/`BatchRecorder`: what each rank decided each step, to compare across ranks;
* `RankGroup`: the offline API's ranks as child processes (`LLM(tp=N)`).

With `size == 1` every helper is the identity, so the single-GPU path pays nothing.
"""
from __future__ import annotations

import datetime
import logging
import os
import queue
import shutil
import tempfile
import time
import traceback
import weakref
from dataclasses import dataclass, field, replace

import torch
import torch.distributed as dist

log = logging.getLogger("minisgl_edu")


@dataclass(frozen=True)
class DistributedInfo:
    rank: int = 0
    size: int = 1

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


_TP = DistributedInfo()


def set_tp_info(rank: int, size: int) -> None:
    global _TP
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} outside tp size {size}")
    _TP = DistributedInfo(rank, size)


def get_tp_info() -> DistributedInfo:
    return _TP


def shard_range(total: int, info: DistributedInfo | None = None) -> tuple[int, int]:
    """The [start, end) slice of `total` items that this rank owns (total must divide evenly)."""
    info = info or _TP
    if total % info.size:
        raise ValueError(f"{total} does not divide by tp size {info.size}")
    n = total // info.size
    return info.rank * n, (info.rank + 1) * n


# ---- the data plane: what the sharded layers call --------------------------------------------------
def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum the partial results of every rank, in place (after a row-parallel layer)."""
    if _TP.size > 1:
        dist.all_reduce(x)
    return x


def all_gather_last_dim(x: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's shard along the last dimension (vocab-parallel logits)."""
    if _TP.size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_TP.size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=-1)


# ---- process groups --------------------------------------------------------------------------------
_CPU_GROUP = None


def init_distributed(rank: int, size: int, device: torch.device | str, init_method: str,
                     timeout_s: float = 600.0) -> None:
    """Join the TP group: NCCL for tensors on CUDA (+ a gloo group for CPU-side control), gloo on CPU.
    `init_method` is a `file://` path in a private temp dir (no TCP port is opened to other hosts).
    A collective that waits longer than `timeout_s` raises instead of hanging."""
    global _CPU_GROUP
    set_tp_info(rank, size)
    if size == 1:
        return
    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    if os.path.exists("/sys/class/net/lo"):  # one host: gloo's sockets listen on loopback only
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if device.type == "cuda":
        # NVLink multicast (NVLS) can take a host's shared GPUs out of service: keep it off
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size, timeout=timeout)
    _CPU_GROUP = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else dist.group.WORLD


def destroy_distributed() -> None:
    global _CPU_GROUP, _TP
    if dist.is_initialized():
        dist.destroy_process_group()
    _CPU_GROUP, _TP = None, DistributedInfo()


def cpu_group():
    """The group for host-side control messages (message counts, barriers)."""
    return _CPU_GROUP


# ---- the control plane: host-side agreement ------------------------------------------------------
def broadcast_count(n: int) -> int:
    """Rank 0's `n` on every rank (the others pass anything). Over the gloo CPU group: no GPU sync."""
    if _TP.size == 1:
        return n
    t = torch.tensor([n if _TP.is_primary else 0], dtype=torch.int64)
    dist.broadcast(t, src=0, group=_CPU_GROUP)
    return int(t.item())


def broadcast_object(obj=None):
    """Rank 0's picklable `obj` on every rank."""
    if _TP.size == 1:
        return obj
    box = [obj if _TP.is_primary else None]
    dist.broadcast_object_list(box, src=0, group=_CPU_GROUP)
    return box[0]


def min_over_ranks(n: int) -> int:
    """The smallest `n` of all ranks: e.g. KV pool size, so every rank has the same number of pages."""
    if _TP.size == 1:
        return n
    t = torch.tensor([n], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_CPU_GROUP)
    return int(t.item())


def receive(inbox, block: bool, use_count: bool = True, wait=None) -> list:
    """This step's messages, the same on every rank.

    Every rank has its own copy of the message stream (`inbox`: anything with `get()` and
    `get_nowait()` raising `queue.Empty`). Rank 0 takes what has arrived; the others take exactly
    as many as rank 0 did, waiting for late ones. `block`: the scheduler is idle, so first wait
    (outside any collective: an idle engine may wait for hours) until one message is here.
    `use_count=False` lets every rank take whatever *it* has seen: chapter 8's counter-example.
    `wait(inbox)` is the blocking get (default `inbox.get()`)."""
    wait = wait or (lambda q: q.get())
    msgs = [wait(inbox)] if block else []
    if _TP.is_primary or not use_count:
        while True:
            try:
                msgs.append(inbox.get_nowait())
            except queue.Empty:
                break
    if use_count:
        n = broadcast_count(len(msgs))
        while len(msgs) < n:  # the stream is the same on every rank: the missing ones are on their way
            msgs.append(wait(inbox))
    return msgs


# ---- what each rank decided ----------------------------------------------------------------------
@dataclass(frozen=True)
class BatchRecord:
    """One step as a rank saw it: enough to tell whether two ranks made the same decision."""
    phase: str
    uids: tuple[int, ...]
    cached_lens: tuple[int, ...]
    extend_lens: tuple[int, ...]
    out_loc: tuple[int, ...]  # the KV slots this step writes: the page allocations
    tokens: tuple[int, ...] | None = None  # sampled this step (None: the forward did not finish)


class BatchRecorder:
    """Wrap an engine's `forward` (and optionally its logits) to record every step it runs."""

    def __init__(self, engine, keep_logits: bool = False, on_record=None):
        self.on_record = on_record  # called with each record before its forward runs
        self.records: list[BatchRecord] = []
        self.logits: list[torch.Tensor] = []
        self.keep_logits = keep_logits
        forward, logits = engine.forward, engine.model.logits

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

        def recording_logits(h):
            out = logits(h)
            if self.keep_logits:
                self.logits.append(out.detach().float().cpu())
            return out

        engine.forward = recording_forward  # instance attributes shadow the methods until detach()
        engine.model.logits = recording_logits
        self.engine = engine

    def detach(self) -> None:
        """Stop recording: the engine's own methods are back (no more host syncs per step)."""
        del self.engine.forward, self.engine.model.logits

    def take(self) -> tuple[list[BatchRecord], list[torch.Tensor]]:
        out = (self.records, self.logits)
        self.records, self.logits = [], []
        return out


def shard_shapes(model) -> dict[str, tuple[int, ...]]:
    """This rank's parameter shapes, for the first decoder layer and the vocabulary."""
    keep = ("layers.0.", "embed_tokens", "lm_head")
    return {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)
            if n.startswith(keep) and "norm" not in n}


# ---- the offline API's ranks: RankGroup (parent side) and _rank_main (each child) ------------------
@dataclass
class RankReport:
    rank: int
    device: str
    shard_shapes: dict[str, tuple[int, ...]]
    records: list[BatchRecord] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)


class RankFailed(RuntimeError):
    """A rank raised or died; `reports` holds what each failed rank had recorded."""

    def __init__(self, msg: str, reports: dict[int, RankReport]):
        super().__init__(msg)
        self.reports = reports


def _rank_main(rank: int, size: int, init_method: str, engine_cfg, sched_kw: dict, inbox, replies,
               parent_pid: int, use_count: bool, timeout_s: float) -> None:
    """One rank: build the same engine and scheduler as every other rank, then loop:
    receive (same messages on every rank) -> step. Only rank 0 replies with tokens."""
    from .scheduler import build_scheduler

    def wait(q):  # block for the next message, but not beyond our parent's life
        while True:
            try:
                return q.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent_pid:
                    os._exit(1)

    recorder, device = None, "cpu"
    try:
        device = f"cuda:{rank}" if torch.device(engine_cfg.device).type == "cuda" else "cpu"
        if device == "cpu":  # share the cores: N ranks x all threads would oversubscribe them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
        init_distributed(rank, size, device, init_method, timeout_s)
        sched = build_scheduler(replace(engine_cfg, device=device), **sched_kw)
        engine = sched.engine
        replies.put(("ready", rank, (engine.max_seq_len, engine.pool.num_pages)))
        running = True
        while running:
            for kind, payload in receive(inbox, block=sched.idle, use_count=use_count, wait=wait):
                if kind == "exit":  # the same step on every rank: nobody is left inside a collective
                    running = False
                    break
                if kind == "reqs":  # one generate() call: all are queued, or none (same on every rank)
                    added, error = [], None
                    try:
                        for uid, ids, sp in payload:
                            added.append(sched.add_request(uid, ids, sp))
                    except ValueError as e:
                        error = str(e)
                        for r in added:
                            sched.abort(r.uid)
                    if rank == 0:
                        replies.put(("added", 0, (error, [(r.uid, r.clamped, r.max_device_len) for r in added])))
                elif kind == "record":  # from now on, keep every step; payload: None (stop) or (logits, live)
                    if recorder is not None:
                        recorder.detach()
                    recorder = None if payload is None else BatchRecorder(
                        engine, payload[0], (lambda rec: replies.put(("step", rank, rec))) if payload[1] else None)
                elif kind == "report":
                    records, logits = recorder.take() if recorder else ([], [])
                    replies.put(("report", rank, RankReport(rank, device, shard_shapes(engine.model), records, logits)))
            if running and not sched.idle:
                outs = sched.step()
                if rank == 0 and outs:
                    replies.put(("tokens", 0, outs))
    except BaseException:
        records, logits = recorder.take() if recorder else ([], [])
        replies.put(("error", rank, (traceback.format_exc(), RankReport(rank, device, {}, records, logits))))
        code = 1
    else:
        code = 0
    replies.close()
    replies.join_thread()  # every reply has left this process
    os._exit(code)  # no slow teardown (torch, process groups): the OS reclaims it all


def _stop(procs, inboxes, root) -> None:
    """Ask every rank to exit, then make sure: no rank outlives this call (no orphans)."""
    for q in inboxes:
        try:
            q.put(("exit", None))
        except (ValueError, OSError):
            pass
    deadline = time.monotonic() + 10
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    shutil.rmtree(root, ignore_errors=True)


class RankGroup:
    """Ranks 0..size-1 of one engine as child processes; this process only publishes messages.

    The parent plays the tokenizer's part: it puts each message into *every* rank's inbox (as the
    server's rank 0 re-publishes raw bytes to ranks 1..N-1), and `receive` makes the ranks take the
    same messages in the same step. Every wait has a limit and checks that the ranks are alive,
    so a dead or stuck rank raises `RankFailed` here instead of hanging."""

    def __init__(self, size: int, engine_cfg, sched_kw: dict, use_count: bool = True, timeout_s: float = 600.0,
                 startup_timeout_s: float = 900.0):
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited threads, CUDA or process groups
        self.size, self.timeout_s = size, timeout_s
        self.live_steps: list[tuple[int, BatchRecord]] = []  # (rank, record) as the ranks started them
        self.root = tempfile.mkdtemp(prefix="minisgl-tp-")  # mode 0700: the rendezvous file is ours alone
        init_method = f"file://{self.root}/init"
        self.inboxes = [ctx.Queue() for _ in range(size)]
        self.replies = ctx.Queue()
        self.procs = [ctx.Process(target=_rank_main, name=f"minisgl-tp-rank{r}", daemon=True,
                                  args=(r, size, init_method, engine_cfg, sched_kw, self.inboxes[r], self.replies,
                                        os.getpid(), use_count, timeout_s))
                      for r in range(size)]
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.inboxes, self.root)
        for p in self.procs:
            p.start()
        ready = self._collect("ready", size, startup_timeout_s)
        self.max_seq_len, self.num_pages = ready[0]

    def publish(self, kind: str, payload=None, ranks: list[int] | None = None) -> None:
        """Put one message into the inbox of every rank (or of `ranks` only: for the demonstration)."""
        for r in range(self.size) if ranks is None else ranks:
            self.inboxes[r].put((kind, payload))

    def next_reply(self, timeout_s: float | None = None):
        """The next reply; raise RankFailed if a rank reported an error, died, or nothing came in time.
        The default limit is a backstop: a stuck collective raises inside the ranks after `timeout_s`."""
        timeout_s = timeout_s or self.timeout_s + 60
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                kind, rank, payload = self.replies.get(timeout=0.2)
            except queue.Empty:
                dead = [(r, p.exitcode) for r, p in enumerate(self.procs) if p.exitcode is not None]
                if dead:
                    self._fail(f"rank {dead[0][0]} exited with code {dead[0][1]}", {})
                if time.monotonic() > deadline:
                    self._fail(f"no reply from the ranks within {timeout_s:.0f} s", {})
                continue
            if kind == "step":
                self.live_steps.append((rank, payload))
                continue
            if kind == "error":
                tb, report = payload
                reports = {rank: report}
                try:  # a collective failing on one rank usually fails the others too: gather them
                    while True:
                        k, r, p = self.replies.get(timeout=2.0)
                        if k == "error":
                            reports[r] = p[1]
                        elif k == "step":
                            self.live_steps.append((r, p))
                except queue.Empty:
                    pass
                dead = [f"rank {r} exited with code {p.exitcode}" for r, p in enumerate(self.procs)
                        if p.exitcode is not None and r not in reports]
                self._fail("; ".join(dead + [f"rank {rank} failed:\n{tb}"]), reports)
            return kind, rank, payload

    def _fail(self, msg: str, reports: dict) -> None:
        self.close()
        raise RankFailed(msg, reports)

    def _collect(self, kind: str, n: int, timeout_s: float | None = None) -> list:
        got = {}
        while len(got) < n:
            k, rank, payload = self.next_reply(timeout_s)
            if k != kind:
                raise RuntimeError(f"expected {kind!r} from the ranks, got {k!r}")
            got[rank] = payload
        return [got[r] for r in sorted(got)]

    def generate(self, requests: list[tuple[int, list[int], object]]) -> dict[int, dict]:
        """Queue (uid, token ids, SamplingParams) on every rank and wait for rank 0's tokens.
        Returns {uid: {"token_ids", "finish_reason", "clamped"}}; raises ValueError as `add_request` does."""
        self.publish("reqs", requests)
        kind, _, (error, added) = self.next_reply()
        if kind != "added":
            raise RuntimeError(f"expected 'added' from rank 0, got {kind!r}")
        if error is not None:
            raise ValueError(error)
        out = {uid: {"token_ids": [], "finish_reason": None, "clamped": clamped} for uid, clamped, _ in added}
        left = len(out)
        while left:
            kind, _, outs = self.next_reply()
            for o in outs:
                if o.token_id >= 0:
                    out[o.uid]["token_ids"].append(o.token_id)
                if o.finished:
                    out[o.uid]["finish_reason"] = o.finish_reason
                    left -= 1
        return out

    def record(self, logits: bool = False, live: bool = False, stop: bool = False) -> None:
        """Make every rank record each step it runs from now on (and the step's logits if asked).
        live: each rank also sends each step as it starts, into `self.live_steps` (seen even if the
        rank then crashes). stop: stop recording (it syncs the host every step: keep it out of timings)."""
        self.publish("record", None if stop else (logits, live))

    def reports(self) -> list[RankReport]:
        """Every rank's shard shapes and the steps it ran since the last report."""
        self.publish("report")
        return self._collect("report", self.size)

    def close(self) -> None:
        self._finalizer()

    @property
    def alive(self) -> bool:
        return any(p.is_alive() for p in self.procs)
