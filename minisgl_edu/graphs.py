"""Chapter 7 — CUDA graphs: why replay a decode step instead of launching it?

One graph per decode batch size (`capture_sizes`), all reading the same static buffers; a batch is
padded to the next captured size with dummy lanes that touch only the dummy page. A small prefill
or mixed step has the same problem, launches costing more than kernels: it runs in a graph of
(decode rows, prompt rows) (`prefill_key`): its decode rows padded like a decode batch, its prompts in
`PREFILL_LANES` lanes whose last one, a dummy, takes up the slack to the graph's token capacity.
"""
from __future__ import annotations

import bisect
import contextlib
import gc
import logging

import torch

from .model import qk_kernel
from .model.layers import fused_kernels
from .paging import next_token_slots
from .req import Batch
from .tp import get_tp_info

log = logging.getLogger("minisgl_edu")


def capture_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to max_bs (and max_bs itself)."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 16))
    return sorted(set(sizes + [max_bs]))


def pad_to(sizes: list[int], bs: int) -> int:
    """The smallest captured size that holds `bs` requests (sizes sorted)."""
    return sizes[bisect.bisect_left(sizes, bs)]


@contextlib.contextmanager
def gc_paused(collect: bool = True):
    """Python's cycle collector runs first, then not at all until the block ends. While a stream captures, no CUDA
    graph may be destroyed; a dead engine's graphs freed by a collection mid-capture break the capture (session 40).
    collect=False pauses without the first run: after a device fault, destroying a graph ends the process."""
    if collect:
        gc.collect()  # a dead engine's graphs go now, and their memory with them, before the first capture
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


PREFILL_LANES = 4  # a prefill graph's prompt lanes: up to 3 prompts, then the slack lane


def extend_capacities(max_extend: int) -> list[int]:
    """Prefill graphs hold 256, 512, 768, 1024, then 1.5x steps of prompt rows, up to max_extend (padding stays < 1/3)."""
    caps, c = [], 256
    while c < max_extend:
        caps.append(c)
        c = c + 256 if c < 1024 else c * 3 // 2 // 256 * 256
    return caps + [max_extend] if max_extend > 0 else []


def prompt_capacities(max_extend: int, max_seq_len: int) -> list[int]:
    """The prompt-row capacities of the prefill graphs a GraphRunner captures: those within the context."""
    return [c for c in extend_capacities(max_extend) if c <= max_seq_len]


class GraphRunner:
    def __init__(self, engine, max_bs: int, progress: bool = True):
        from tqdm.auto import tqdm
        self.engine = engine
        self.sizes = capture_sizes(min(max_bs, engine.cfg.max_running_reqs))
        self.max_bs = self.sizes[-1]
        pool, backend, dev = engine.pool, engine.backend, engine.device
        # prefill / mixed steps: decode rows padded to 0 or a power of two, x prompt-row capacities
        caps = prompt_capacities(engine.cfg.cuda_graph_max_extend, engine.max_seq_len)
        pow2 = {1 << i for i in range(self.max_bs.bit_length())} | {self.max_bs}
        self.mixed_sizes = [0] + sorted(pow2) if caps else []
        self.prefill_keys = [(d, c) for d in self.mixed_sizes for c in caps]  # (decode rows, prompt rows)
        tokens = max([self.max_bs] + [d + c for d, c in self.prefill_keys])
        self.dummy_slot = int(pool.num_pages * pool.page_size)  # first slot of the dummy page
        # static inputs shared by every graph: a replay reads whatever was copied here
        self.input_ids = torch.zeros(tokens, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(tokens, dtype=torch.int64, device=dev)
        self.out_loc = torch.full((tokens,), self.dummy_slot, dtype=torch.int64, device=dev)  # int64: index-ready
        # the head (cfg.graph_head): the decode graphs end in the LM head and the greedy argmax, which writes each
        # row's token into the token pool at (sample_rows, sample_pos); padding lanes write the dummy row there
        self.head = engine.cfg.graph_head and get_tp_info().size == 1  # TP: the vocab-parallel head gathers, eager
        if self.head:
            self.logits = torch.empty(self.max_bs, engine.vocab_size, dtype=engine.dtype, device=dev)  # one for all
            self.sample_rows = torch.full((self.max_bs,), pool.dummy_row, dtype=torch.int64, device=dev)
            self.sample_pos = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
            self.tokens = torch.zeros(self.max_bs, dtype=torch.int32, device=dev)  # the greedy argmax's, likewise
            self.greedy = True  # False once a capture finds no greedy kernel (fused kernels off, no cubin)
        # one KV-index buffer shared by all graph wrappers (only one replays at a time)
        self.kv_indices = torch.zeros(self.max_bs * engine.max_seq_len, dtype=torch.int32, device=dev)
        # the prompt lanes' own (a mixed step plans both): 3 prompts, then the slack lane's keys
        lanes = PREFILL_LANES + (0 if getattr(backend, "split_mixed", True) else self.max_bs)  # + decode lanes
        self.prefill_kv_indices = torch.zeros(lanes * engine.max_seq_len, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}  # decode: by batch size
        self.outputs: dict[int, torch.Tensor] = {}
        self.balanced_graphs: dict[int, torch.cuda.CUDAGraph] = {}  # decode, uneven contexts (FlashInferBackend.balanced)
        self.balanced_outputs: dict[int, torch.Tensor] = {}
        self.prefill_graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # by (decode rows, prompt rows)
        self.prefill_outputs: dict[tuple[int, int], torch.Tensor] = {}
        self.mempool = torch.cuda.graph_pool_handle()  # smaller graphs reuse the largest one's memory
        self.stream = torch.cuda.Stream(dev)  # captures run here
        reserved0 = torch.cuda.memory_reserved(dev)  # this process's memory: others may share the GPU
        todo = sorted(self.prefill_keys, key=lambda k: -sum(k)) + [(bs, 0) for bs in sorted(self.sizes, reverse=True)]
        with gc_paused():
            for bs, t in tqdm(todo, desc="capture CUDA graphs", disable=not progress):
                if bs:
                    backend.add_graph_wrapper(bs, self.kv_indices)
                if t:
                    backend.add_graph_wrapper(bs, self.prefill_kv_indices, t, PREFILL_LANES)
                g, out = self._capture(self._static_batch(bs, t))  # all lanes are padding during capture
                if t:
                    self.prefill_graphs[bs, t], self.prefill_outputs[bs, t] = g, out
                else:
                    self.graphs[bs], self.outputs[bs] = g, out
            for bs in sorted(getattr(backend, "balanced_wrappers", {}), reverse=True):  # the same step, the other kernel
                batch = self._static_batch(bs)
                batch.balanced = True
                self.balanced_graphs[bs], self.balanced_outputs[bs] = self._capture(batch)
        torch.cuda.synchronize(dev)
        log.info("CUDA graphs captured for decode batch sizes %s and %d prefill shapes (%.0f MiB)", self.sizes,
                 len(self.prefill_keys), (torch.cuda.memory_reserved(dev) - reserved0) / 2**20)

    def _capture(self, batch: Batch) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """One graph of `batch`'s step and its hidden states; a decode graph with the head also fills `self.logits`
        and `self.tokens`."""
        engine, backend = self.engine, self.engine.backend
        stream = self.stream
        decode_head = self.head and not batch.padded_tokens
        with torch.inference_mode(), torch.cuda.stream(stream):
            backend.prepare(batch)  # a prefill graph's first plan fixes its wrapper's token count
            for _ in range(2):  # warm up outside the graph (lazy inits, kernel selection)
                h = engine.model(batch.input_ids, batch.positions, backend, batch)
                if decode_head:
                    self._head(h)
            stream.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.mempool, stream=stream):
                out = engine.model(batch.input_ids, batch.positions, backend, batch)
                if decode_head:
                    self._head(out)
            if engine.cfg.warm_start:  # a graph's first replay uploads it (~0.8 ms): now, not in a served step
                g.replay()  # its own capture-time plan and padding lanes: it writes only the dummy page (and row)
        return g, out

    def _head(self, h: torch.Tensor) -> None:
        """The LM head into the shared logits buffer, then the greedy argmax into the shared tokens buffer and the
        token pool (greedy.cu), unless the fused kernels are off or the greedy kernel is missing (`self.greedy`)."""
        n = len(h)
        logits = torch.mm(h, self.engine.model.lm_head.weight.t(), out=self.logits[:n])  # F.linear's own product
        self.greedy = self.greedy and fused_kernels(logits) is not None and qk_kernel.greedy(
            logits, self.sample_rows[:n], self.sample_pos[:n], self.engine.pool.token_pool, self.tokens[:n]) is not None

    def _static_batch(self, padded: int, tokens: int = 0) -> Batch:
        b = Batch([], "prefill" if tokens else "decode", padded_size=padded, padded_tokens=tokens)
        n = padded + tokens
        b.input_ids, b.positions, b.out_loc = self.input_ids[:n], self.positions[:n], self.out_loc[:n]
        return b

    def can_run(self, batch: Batch) -> bool:
        return not batch.is_prefill and 0 < batch.size <= self.max_bs

    def padded_size(self, bs: int) -> int:
        return pad_to(self.sizes, bs)

    def key(self, batch: Batch) -> tuple[int, int] | None:
        """The graph `batch` replays in, as (padded decode rows, padded prompt rows), or None: run it eager."""
        if batch.is_prefill:
            return self.prefill_key(batch)
        return (self.padded_size(batch.size), 0) if self.can_run(batch) else None

    def prefill_key(self, batch: Batch) -> tuple[int, int] | None:
        """The (decode rows, prompt rows) graph a prefill step fits, or None (run it eager): its decode rows
        padded to a captured size, its prompts in the lanes but the last, their tokens and a slack token within."""
        d = batch.decode_rows
        prompts, rows = batch.size - d, sum(r.extend_len for r in batch.reqs[d:])
        if prompts >= PREFILL_LANES:
            return None
        for dp, t in self.prefill_keys:  # in order: fewest decode rows, then fewest prompt rows
            if dp >= d and t >= rows + PREFILL_LANES - prompts:
                return dp, t
        return None

    def replay_prefill(self, batch: Batch) -> torch.Tensor:
        """`replay` for a prefill step planned for its graph (batch.padded_size decode rows, then
        batch.padded_tokens prompt rows): the batch's rows are copied to both parts; returns [tokens, hidden]."""
        d, (dp, t) = batch.decode_rows, (batch.padded_size, batch.padded_tokens)
        n = len(batch.positions)
        for buf, rows in ((self.input_ids, batch.input_ids), (self.positions, batch.positions), (self.out_loc, batch.out_loc)):
            if d == dp:  # no decode padding: the rows are in the graph's order already, one copy
                buf[:n].copy_(rows, non_blocking=True)
                continue
            buf[:d].copy_(rows[:d], non_blocking=True)
            buf[dp:dp + n - d].copy_(rows[d:], non_blocking=True)
        if d < dp:
            self.out_loc[d:dp].fill_(self.dummy_slot)  # padding lanes and the slack lane write only the dummy page
        self.out_loc[dp + n - d:dp + t].fill_(self.dummy_slot)
        self.prefill_graphs[dp, t].replay()
        out = self.prefill_outputs[dp, t]
        return out[:n] if d == dp else torch.cat([out[:d], out[dp:dp + n - d]])

    def replay(self, batch: Batch, sample_at: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Copy the batch into the static buffers, replay the graph of `batch.padded_size`, return [bs, hidden];
        `batch.attn_metadata` must already be planned for the padded size (Engine.prepare does it). With the head,
        `sample_at` = (page-table rows, device_len) of the batch's requests: where the greedy tokens go in the token
        pool (None: read from the requests); `head_out` then holds the step's logits and tokens."""
        bs, pbs = batch.size, batch.padded_size
        self.input_ids[:bs].copy_(batch.input_ids, non_blocking=True)
        self.positions[:bs].copy_(batch.positions, non_blocking=True)
        self.out_loc[:bs].copy_(batch.out_loc, non_blocking=True)
        if pbs > bs:
            self.out_loc[bs:pbs].fill_(self.dummy_slot)  # stale real slots here would overwrite someone's KV
        if self.head:
            rows, pos = sample_at if sample_at is not None else next_token_slots(batch.reqs, self.engine.device)
            self.sample_rows[:bs].copy_(rows, non_blocking=True)
            self.sample_pos[:bs].copy_(pos, non_blocking=True)
            if pbs > bs:
                self.sample_rows[bs:pbs].fill_(self.engine.pool.dummy_row)  # stale rows: someone's token overwritten
        graphs, outputs = (self.balanced_graphs, self.balanced_outputs) if batch.balanced else (self.graphs, self.outputs)
        graphs[pbs].replay()
        return outputs[pbs][:bs]

    def head_out(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """After `replay(batch)`: its logits [bs, vocab] and greedy tokens [bs] (None without the greedy kernel), both
        the graphs' own memory, valid until the next replay; None when the graphs hold no head."""
        if not self.head:
            return None
        return self.logits[:batch.size], self.tokens[:batch.size] if self.greedy else None
