"""Chapter 7 — CUDA graphs: why replay a decode step instead of launching it?

One graph per decode batch size (`capture_sizes`), all reading the same static buffers; a batch is
padded to the next captured size with dummy lanes that touch only the dummy page.
"""
from __future__ import annotations

import bisect
import logging

import torch

from .req import Batch

log = logging.getLogger("minisgl_edu")


def capture_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 up to max_bs (and max_bs itself)."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 16))
    return sorted(set(sizes + [max_bs]))


def pad_to(sizes: list[int], bs: int) -> int:
    """The smallest captured size that holds `bs` requests (sizes sorted)."""
    return sizes[bisect.bisect_left(sizes, bs)]


class GraphRunner:
    def __init__(self, engine, max_bs: int, progress: bool = True):
        from tqdm.auto import tqdm
        self.engine = engine
        self.sizes = capture_sizes(min(max_bs, engine.cfg.max_running_reqs))
        self.max_bs = self.sizes[-1]
        pool, backend, dev = engine.pool, engine.backend, engine.device
        self.dummy_slot = int(pool.num_pages * pool.page_size)  # first slot of the dummy page
        # static inputs shared by every graph: a replay reads whatever was copied here
        self.input_ids = torch.zeros(self.max_bs, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(self.max_bs, dtype=torch.int64, device=dev)
        self.out_loc = torch.full((self.max_bs,), self.dummy_slot, dtype=torch.int64, device=dev)  # int64: index-ready
        # one KV-index buffer shared by all graph wrappers (only one replays at a time)
        self.kv_indices = torch.zeros(self.max_bs * engine.max_seq_len, dtype=torch.int32, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.mempool = torch.cuda.graph_pool_handle()  # smaller graphs reuse the largest one's memory
        stream = torch.cuda.Stream(dev)
        reserved0 = torch.cuda.memory_reserved(dev)  # this process's memory: others may share the GPU
        for bs in tqdm(sorted(self.sizes, reverse=True), desc="capture CUDA graphs", disable=not progress):
            backend.add_graph_wrapper(bs, self.kv_indices)
            batch = self._static_batch(bs)  # all lanes are padding during capture
            with torch.inference_mode(), torch.cuda.stream(stream):
                backend.prepare(batch)
                for _ in range(2):  # warm up outside the graph (lazy inits, kernel selection)
                    engine.model(batch.input_ids, batch.positions, backend, batch)
                stream.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=self.mempool, stream=stream):
                    self.outputs[bs] = engine.model(batch.input_ids, batch.positions, backend, batch)
            self.graphs[bs] = g
        torch.cuda.synchronize(dev)
        log.info("CUDA graphs captured for decode batch sizes %s (%.0f MiB)", self.sizes,
                 (torch.cuda.memory_reserved(dev) - reserved0) / 2**20)

    def _static_batch(self, padded: int) -> Batch:
        b = Batch([], "decode", padded_size=padded)
        b.input_ids, b.positions, b.out_loc = self.input_ids[:padded], self.positions[:padded], self.out_loc[:padded]
        return b

    def can_run(self, batch: Batch) -> bool:
        return not batch.is_prefill and 0 < batch.size <= self.max_bs

    def padded_size(self, bs: int) -> int:
        return pad_to(self.sizes, bs)

    def replay(self, batch: Batch) -> torch.Tensor:
        """Copy the batch into the static buffers, replay the graph of `batch.padded_size`, return [bs, hidden];
        `batch.attn_metadata` must already be planned for the padded size (Engine.prepare does it)."""
        bs, pbs = batch.size, batch.padded_size
        self.input_ids[:bs].copy_(batch.input_ids, non_blocking=True)
        self.positions[:bs].copy_(batch.positions, non_blocking=True)
        self.out_loc[:bs].copy_(batch.out_loc, non_blocking=True)
        if pbs > bs:
            self.out_loc[bs:pbs].fill_(self.dummy_slot)  # stale real slots here would overwrite someone's KV
        self.graphs[pbs].replay()
        return self.outputs[pbs][:bs]
