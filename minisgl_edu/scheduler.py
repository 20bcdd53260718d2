"""Chapter 6 — The scheduler loop, normal and overlapped: what does the CPU do while the GPU works?

One iteration: receive -> schedule (prefill first, else decode) -> launch -> process. The overlap
loop launches step N+1 before it processes step N (the ledger advances at launch), so a request
that stops in step N is freed once and its row waits in `deferred_rows`. With `mixed_chunk` the
running requests ride in every prefill step as one-token rows, so no decode waits a step for it.
While step N's tokens travel to the host, `while_waiting` runs (the server reads its mail there).
Tracing is a hook (trace.py).
"""
from __future__ import annotations

import logging
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch

from .config import SchedulerConfig, eos_ids
from .engine import Engine
from .graphs import PREFILL_LANES
from .grammar import backend_for
from .prefill import PrefillAdder, pages_to_finish, reserved_pages
from .radix import make_cache
from .req import Batch, Req, SamplingParams
from .trace import StepStats, Tracer

log = logging.getLogger("minisgl_edu")


@dataclass
class TokenOutput:
    uid: int
    token_id: int  # -1 when nothing new was produced (an abort or an error)
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    logprobs: tuple[float, list[int], list[float]] | None = None  # (chosen, top ids, top logprobs) if asked
    prompt_len: int = 0  # the request's, for the usage counts: a finished one has left `live` already
    clamped: bool = False  # the first token of a request whose max_tokens was cut to fit the context


class Scheduler:
    def __init__(self, engine, cfg: SchedulerConfig | None = None, eos_token_ids: tuple[int, ...] = (), tracer=None,
                 stats_kept: int | None = None):
        cfg = cfg or SchedulerConfig(model_path=engine.cfg.model_path)  # the switches' defaults
        cuda = engine.device.type == "cuda"
        self.cfg = cfg
        self.engine, self.pool = engine, engine.pool
        self.page_size = self.pool.page_size
        self.cache = make_cache(cfg.cache, self.page_size, engine.device)
        self.pool.evict_fn = self.cache.evict
        # the CUDA default is larger: bigger prefill GEMMs keep the tensor cores busier (issue 16)
        self.max_prefill_tokens = cfg.max_prefill_tokens or (16384 if cuda else 8192)
        self.overlap = cuda if cfg.overlap is None else cfg.overlap
        self.mixed_chunk = cuda if cfg.mixed_chunk is None else cfg.mixed_chunk
        # a smaller budget while requests decode: shorter mixed steps (a lower ITL tail), more of them (a later first token)
        mixed = cfg.mixed_prefill_tokens or (mixed_tokens_for(engine) if cuda else None) or self.max_prefill_tokens
        self.mixed_prefill_tokens = min(mixed, self.max_prefill_tokens)
        # a longer queue than this: the full budget (throughput first)
        self.mixed_backlog_tokens = cfg.mixed_backlog_tokens or MIXED_BACKLOG_TOKENS
        # a prompt graph holds PREFILL_LANES - 1 prompts (graphs.py): a mixed step of a short queue takes no more, or it
        # runs without a graph (served SmolLM2 on an H200: 13.5-16 ms for 4-7 prompts, every decoding request waiting,
        # against 2-4 ms in a graph); None: no prompt graphs, no limit
        self.mixed_lanes = PREFILL_LANES - 1 if engine.graphs is not None and engine.graphs.prefill_keys else None
        if self.mixed_chunk and self.mixed_prefill_tokens < self.max_prefill_tokens:  # say which default applies
            log.info("mixed budget: %d prompt tokens a step while at most %d wait (then %d)", self.mixed_prefill_tokens,
                     self.mixed_backlog_tokens, self.max_prefill_tokens)
        self.eos = set(eos_token_ids)
        engine.eos_token_ids = tuple(self.eos)  # min_tokens masks them in the sampler
        self.pending: deque[Req] = deque()  # waiting for admission; a chunked request sits in front
        # overlap + early_admit: the next step's admission, made while step N's tokens travelled (`wait`); its
        # requests hold rows and locked prefixes but are in neither `pending` nor `running` until `schedule`
        self.early_admit = self.overlap and cfg.early_admit
        self.admitted: PrefillAdder | None = None
        self.running: list[Req] = []  # decoding
        self.live: dict[int, Req] = {}  # every request not yet finished, by uid
        self.in_flight = None  # overlap: (batch, tokens on their way to the host, copy-done event)
        self.deferred_rows: list[int] = []  # overlap: rows of requests the in-flight step still writes
        self.stream = torch.cuda.Stream(engine.device) if cuda and self.overlap else None  # the scheduler stream
        # every step's StepStats offline; a server rank, which runs for days, keeps the latest `stats_kept`
        self.stats: list[StepStats] | deque[StepStats] = [] if stats_kept is None else deque(maxlen=stats_kept)
        self.steps_done = 0  # every step launched, however many `stats` keeps
        self.tracer = tracer  # a trace.Tracer: per-step spans for Perfetto, or None
        # overlap: called while step N's tokens are on their way, until they arrive (the server reads its mail
        # there: the host would only wait, so a receive there delays no step); None: just wait
        self.while_waiting: Callable[[], object] | None = None

    # ---- receive -------------------------------------------------------------------------------
    def add_request(self, uid: int, token_ids: list[int], sampling: SamplingParams) -> Req:
        """Validate and queue a request. Raises ValueError for input no schedule could serve."""
        sampling.validate(self.engine.vocab_size)
        if uid in self.live:
            raise ValueError(f"request id {uid} is already in use")
        if len(token_ids) == 0:
            raise ValueError("the prompt is empty")
        vocab = self.engine.vocab_size
        if min(token_ids) < 0 or max(token_ids) >= vocab:  # two C loops: a Python one cost ~70 us per 900 tokens
            raise ValueError(f"token ids must lie in [0, {vocab})")
        ctx = self.engine.max_seq_len
        if len(token_ids) >= ctx:
            raise ValueError(f"the prompt has {len(token_ids)} tokens; the context holds {ctx}, "
                             "including at least one generated token")
        req = Req(uid, list(token_ids), sampling)
        if sampling.json_schema is not None:  # compiled at admission: a schema xgrammar refuses is a ValueError
            req.grammar = backend_for(self.engine.cfg.model_path, self.engine.vocab_size, tuple(self.eos)).new_state(
                sampling.json_schema)
        if req.max_device_len > ctx:  # clamp the output to the context (callers are told: req.clamped)
            req.max_device_len = ctx
            req.clamped = True
        if (need := pages_to_finish(req, self.page_size)) > self.pool.num_pages:
            raise ValueError(f"prompt ({req.prompt_len}) + max_tokens needs {need} KV pages, but the pool has only {self.pool.num_pages}")
        self.live[uid] = req
        self.pending.append(req)
        return req

    def abort(self, uid: int) -> list[TokenOutput]:
        req = self.live.get(uid)
        if req is None:
            return []
        if req in self.pending:
            self.pending.remove(req)
        elif self.admitted is not None and req in self.admitted.added:  # admitted early: it leaves the next step
            self.admitted.added.remove(req)
            self.admitted = self.admitted if self.admitted.added else None
        self._finish(req, "abort")
        return [TokenOutput(uid, -1, True, "abort", prompt_len=req.prompt_len)]

    @property
    def idle(self) -> bool:
        return not self.pending and not self.running and self.in_flight is None and self.admitted is None

    # ---- schedule ------------------------------------------------------------------------------
    def admit(self) -> PrefillAdder:
        """Admission (chapter 3): the waiting requests that fit the next step, in order, taken out of `pending`.
        Continues an early admission (`self.admitted`) if there is one, its reserved size counted afresh: the
        running requests that finished since then no longer reserve anything."""
        adder = self.admitted
        if adder is None:
            # only admission needs the reserved size: skip the sum over every running request otherwise
            reserved = reserved_pages(self.running, self.page_size) if self.pending else 0
            budget = self.token_budget() if self.mixed_chunk and self.running else self.max_prefill_tokens
            adder = PrefillAdder(budget, reserved, self.pool, self.cache)
        elif self.pending:
            adder.reserved_pages = reserved_pages(self.running + adder.added, self.page_size)
        # the mixed budget applies (a short queue): the step's prompts fit a prompt graph's lanes
        lanes = self.mixed_lanes if self.mixed_lanes and self.pending and self.mixed_chunk and self.running and \
            self.token_budget() < self.max_prefill_tokens else None
        first = len(adder.added)
        for req in self.pending:
            if lanes is not None and len(adder.added) >= lanes:
                break
            if not adder.try_add(req):
                break
        for req in adder.added[first:]:
            self.pending.remove(req)
        return adder

    def schedule(self) -> Batch | None:
        adder, self.admitted = self.admit(), None
        mixed = self.mixed_chunk and self.running
        if adder.added:
            if adder.added[-1].is_chunked:  # it comes back first next step
                self.pending.appendleft(adder.added[-1])
            if mixed:  # their next tokens ride along (their pages are reserved already)
                return Batch(self.running + adder.added, "prefill", decode_rows=len(self.running))
            return Batch(adder.added, "prefill")  # the running requests wait a step
        if self.pending and not self.running and self.in_flight is None:
            raise RuntimeError(f"cannot admit a request into an idle engine: {adder.log}")
        return Batch(list(self.running), "decode") if self.running else None

    def token_budget(self) -> int:
        """A mixed step's token budget: the mixed one while the waiting prompts' tokens (the backlog) are at most
        `mixed_backlog_tokens`, the full one once a queue has formed."""
        if self.mixed_prefill_tokens >= self.max_prefill_tokens:
            return self.mixed_prefill_tokens
        backlog = 0
        for req in self.pending:  # stops at the limit: a long queue is not summed every step
            backlog += req.prompt_len - req.cached_len
            if backlog > self.mixed_backlog_tokens:
                return self.max_prefill_tokens
        return self.mixed_prefill_tokens

    # ---- launch --------------------------------------------------------------------------------
    def launch(self, batch: Batch) -> torch.Tensor:
        """Assign KV slots, run the forward, and advance every ledger as if the token were known."""
        self.stats.append(StepStats.of(batch))
        self.steps_done += 1
        batch.out_loc = self.pool.assign_locations(batch.reqs)
        tokens = self.engine.forward(batch, wait=False) if self.overlap else self.engine.forward(batch)
        self.stats[-1].graph = batch.in_graph
        for req in batch.reqs:
            if req.is_chunked:
                req.cached_len = req.device_len
                continue
            if not req.is_decoding:  # its prompt ends in this step: it starts decoding
                self.running.append(req)
            req.complete_one()
            if req.device_len >= req.max_device_len:  # its last token is in flight: no further step
                self.running.remove(req)
        return tokens

    # ---- process results -----------------------------------------------------------------------
    def process(self, batch: Batch, tokens: list[int]) -> list[TokenOutput]:
        out = []
        for i, (req, tok) in enumerate(zip((batch.reqs[i] for i in batch.sample_rows), tokens)):
            if req.finish_reason is not None:  # freed after step N while this step was in flight
                continue
            req.token_ids.append(tok)
            reason = None
            if (tok in self.eos and not req.sampling.ignore_eos) or tok in req.sampling.stop_token_ids:
                reason = "stop"
            elif len(req.token_ids) >= req.max_device_len:
                reason = "length"
            if reason:
                self._finish(req, reason)
            k = req.sampling.logprobs
            out.append(TokenOutput(req.uid, tok, reason is not None, reason,
                                   batch.logprobs.row(i, k) if k is not None else None, req.prompt_len,
                                   req.clamped and len(req.token_ids) == req.prompt_len + 1))
        return out

    def _finish(self, req: Req, reason: str) -> None:
        """Hand the request's computed prefix to the cache, free the rest, unlock, release its row.

        Its page-table row, cut at aligned = cached_len rounded down to a whole page and at present =
        how much of [0, aligned) the tree held already (matched_len <= present <= aligned; NaiveCache,
        keeping nothing, reports all of it):

            positions                slots came from    at finish
            [0, matched_len)         the cache          the tree's: unlocked below, nothing to free
            [matched_len, present)   this request       duplicates of the tree's slots: freed
            [present, aligned)       this request       handed to the tree by insert_prefix
            [aligned, cached_len)    this request       the partial last page: freed by free_tail
        """
        req.finish_reason = reason
        self.live.pop(req.uid, None)
        if req in self.running:
            self.running.remove(req)
        if req.table_idx < 0:
            return  # never admitted: holds nothing
        ps, row = self.page_size, req.table_idx
        aligned = req.cached_len // ps * ps
        present = self.cache.insert_prefix(req.token_ids[:aligned], self.pool.page_table[row, :aligned])
        assert req.matched_len <= present <= aligned, (req.matched_len, present, aligned)  # the table's order
        self.pool.free(self.pool.page_table[row, req.matched_len:present])  # our copies of what was cached
        self.pool.free_tail(req, aligned)
        self.cache.unlock(req.cache_handle)
        if self.in_flight is not None:  # the step in flight writes this row's next token: reuse it later
            self.deferred_rows.append(row)
        else:
            self.pool.release_row(row)
        req.table_idx = -1

    # ---- the loop ------------------------------------------------------------------------------
    def step(self) -> list[TokenOutput]:
        """One iteration of the loop (normal or overlap, as configured)."""
        if not self.overlap:
            batch = self.schedule()
            if batch is None:
                return []
            return self.process(batch, self.launch(batch).tolist())
        with torch.cuda.stream(self.stream) if self.stream is not None else nullcontext():
            batch = self.schedule()
            launched = None
            if batch is not None:
                tokens = self.launch(batch)  # step N+1 is queued on the engine stream
                host, event = self.engine.to_host(tokens)  # its tokens start their way to the host
                launched = (batch, host, event)
            prev, self.in_flight = self.in_flight, launched
            if prev is None:
                return []
            batch_prev, host_prev, event_prev = prev
            self.wait(event_prev)  # the copy-done event guards the CPU read (the only wait)
            for row in self.deferred_rows:  # step N, the last to write these rows, is done
                self.pool.release_row(row)
            self.deferred_rows.clear()
            return self.process(batch_prev, host_prev.tolist())

    def wait(self, event) -> None:
        """Until step N's tokens are on the host (`event`, None on the CPU), running `while_waiting` meanwhile: at
        least once, then as long as the copy is not done. Step N+1 is already queued, so the GPU never waits on it.
        With early_admit the next step's admission runs here too, once the mail is read: the host would only wait,
        and a mixed step's launch, which step N's tokens wait behind, is shorter by it. Always, not only while the
        copy is on its way, so every rank of a TP group admits at the same point (chapter 8)."""
        if self.while_waiting is not None:
            self.while_waiting()
        if self.early_admit and self.pending:
            with self.tracer.span("admit early") if self.tracer is not None else nullcontext():
                adder = self.admit()
            self.admitted = adder if adder.added else None  # nothing fitted: schedule tries afresh
        if self.while_waiting is not None:
            while event is not None and not event.query():
                self.while_waiting()
        if event is not None:
            event.synchronize()

    # ---- integrity and the tracing hook ---------------------------------------------------------
    def check_integrity(self) -> None:
        """Every page and every row accounted for exactly once (PagePool.check_integrity), the tree consistent."""
        self.cache.check_integrity()
        self.pool.check_integrity(list(self.live.values()), self.cache.all_locations(), len(self.deferred_rows))

    @property
    def tracer(self) -> Tracer | None:
        return self._tracer

    @tracer.setter
    def tracer(self, tracer: Tracer | None) -> None:
        """Assigning a Tracer attaches its hook: spans around schedule, launch and process (trace.py)."""
        self._tracer = tracer
        if tracer is not None:
            tracer.attach(self)


# A mixed step's prompt part, by default, does at most this much work (2 x non-embedding parameters x tokens): on the
# H200 about half a decode step of the served anchors' load. Served Qwen3-0.6B, a 900-token prompt made a 4.3 ms mixed
# step against 2.0 ms decode steps, and those steps held the ITL tail above 2x a step; with 509, twelve paired runs
# read 1.92-1.99 against the full budget's 2.17-2.25 (issue 18, benchmarks/RESULTS.md session 13)
MIXED_STEP_FLOPS = 0.5e12
MIXED_BACKLOG_TOKENS = 4096  # the default queue rule: more prompt tokens waiting than this get the full budget


def mixed_tokens_for(engine) -> int:
    """The default mixed budget: the largest prompt-graph capacity (graphs.prompt_capacities, less the rows its
    padding lanes keep) whose prompt work stays within MIXED_STEP_FLOPS; the largest one for a model small enough
    that all fit, since a mixed step above it runs without a graph (its launch costs the host ~10 ms, chapter 6);
    the smallest when none fits, since a graph runs all its rows and a smaller chunk would cost the same (H200: +16
    and +253 tokens cost one step alike). Without prompt graphs, the work bound itself. Counted per rank: each rank
    computes its shard."""
    from .graphs import PREFILL_LANES, prompt_capacities
    bound = int(MIXED_STEP_FLOPS // (2 * max(active_params(engine.model), 1)))
    cfg = engine.cfg  # no decode graphs (cuda_graph_max_bs 0): no GraphRunner, no prompt graphs either
    caps = prompt_capacities(cfg.cuda_graph_max_extend, engine.max_seq_len) if cfg.cuda_graph_max_bs > 0 else []
    if not caps:
        return max(bound, 1)
    fits = [c for c in caps if c <= bound] or caps[:1]
    return fits[-1] - (PREFILL_LANES - 1)  # the rows the graph's padding lanes keep


def active_params(model) -> int:
    """The parameters one token's forward multiplies by (its FLOPs are twice this), embeddings and LM head apart:
    of a mixture of experts (chapter 10) only its top_k experts count, not all of them (Qwen3-30B-A3B: ~3B, not 30B)."""
    from .model.moe import SparseMoeBlock
    total, experts = 0, set()
    for mod in model.modules():
        if isinstance(mod, SparseMoeBlock):
            ps = list(mod.experts.parameters())
            total += sum(p.numel() for p in ps) * mod.top_k // mod.experts.gate_up_proj.shape[0]
            experts.update(id(p) for p in ps)
    return total + sum(p.numel() for n, p in model.named_parameters()
                       if id(p) not in experts and "embed" not in n and "lm_head" not in n)


def build_scheduler(cfg: SchedulerConfig, stats_kept: int | None = None) -> Scheduler:
    """One rank's engine and its scheduler, as the offline `LLM` and every scheduler rank build them."""
    engine = Engine(cfg)
    return Scheduler(engine, cfg, eos_ids(cfg.model_path, not cfg.skip_tokenizer_init),
                     Tracer(cfg.trace) if cfg.trace is not None else None, stats_kept)
