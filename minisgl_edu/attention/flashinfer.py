"""Chapter 7 — The FlashInfer backend: FlashInfer's paged prefill and decode kernels on the same indices.

`plan()` plans one wrapper per step from the `KernelArgs` (prefill, decode, or a CUDA graph's decode
wrapper); every layer runs it over the KV pool the reference backend uses, viewed as pages of the pool's
page_size tokens (`page_args`: with page_size 1, a slot is a page).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..graphs import PREFILL_LANES
from ..model.layers import fused_kernels
from ..req import Batch
from .base import AttentionBackend
from .metadata import KernelArgs, kernel_args, mixed_lanes, page_args, split_args, without_last_lane

CUDA_CORE_GROUP_SIZES = (1, 2, 3, 4, 8)  # GQA group sizes FlashInfer's CUDA-core decode kernel is built for
# a mixed step's decode rows through FlashInfer's decode kernel and its prompts through the prefill kernel (True),
# or every row, decode rows as one-query lanes, through one prefill kernel (False). On the H200 one kernel made a
# SmolLM2 mixed step's attention 40.7 -> 26.6 us a layer, but its plan over every lane costs the host more, and
# served on one machine its ITL p99 was 3.17 ms against 2.80 (chapter 7): split stays the default
SPLIT_MIXED = True
# a split mixed step's two attention kernels side by side, the decode rows' on a second stream (True), or one after
# the other (False, the twin). Neither fills the H200 alone: in a SmolLM2 mixed step (64 decode rows, a 561-token
# prompt) they took 17.0 and 19.5 us a layer, one after the other. Same kernels, same plans, so the same numbers
PARALLEL_MIXED = True
# a decode step of many requests whose contexts are uneven goes through the tensor-core decode kernel, whose planner
# cuts long KVs into balanced chunks (True), or always through the CUDA-core kernel (False, the twin). That kernel
# gives each request's keys to one CTA per head; at 64+ requests they all fit in one wave, so the longest request
# sets the kernel's length. On the H200's P1 the tensor-core kernel was 3-9 % faster on such steps, and slower on even
# ones (chapter 7, "Where the offline workload's time goes")
BALANCED_DECODE = True
BALANCED_MIN_BS, UNEVEN = 64, 1.3  # from that P1: at 17-64 requests both kernels took the same time
# its plan costs the host ~0.6 ms more (FlashInfer takes a Python max() over the lengths): only where the KV read
# alone takes longer than that (4 GiB: ~1 ms at 4 TB/s), so the overlap loop hides it behind the GPU
BALANCED_MIN_KV_BYTES = 4 << 30
# a decode step a little too big for one wave of the CUDA-core kernel goes through the balanced kernel too, however even
# its contexts (True), or only when uneven (False, the twin). That kernel gives each (request, KV head) one CTA; in a
# CUDA graph its planner splits keys only while those CTAs fit one wave of the grid (148 Qwen3-0.6B requests on an
# H100 or H200, learnt from the plans: `wave_reqs`). Just past it, the CTAs that spill run in a second, nearly empty
# wave: on an H100, 160 even requests took 290 us a layer against the tensor-core kernel's 241, 192 took 324 against
# 287, and from 1.5 waves on the two were even (benchmarks/lt_probe.py --attn; chapter 7)
WAVE_BALANCED = True
WAVE_SPILL = 1.45  # up to this many waves of the CUDA-core grid
# a CUDA graph's wrapper re-planned by FlashInfer's host planner alone (True), or through its plan() (False). A graph's
# buffers are fixed, so its plan is two things: the lengths into those buffers, the planner's schedule into the
# workspace. plan() does them behind a general front (checks, dtype lookups, host copies of host arrays, a Python max()
# over the lengths). On the H200 the lean plan left the same bytes and cut a SmolLM2 mixed launch by ~100 us, but the
# served ITL p99 did not follow (10 paired runs: medians 2.07 vs 2.11 of a step, and three of its runs had the worst
# tails), so plan() stays the default (chapter 7)
LEAN_PLAN = False
# with a pool of page_size > 1, FlashInfer reads whole pages, one index per page (True: `page_args`), or every slot as
# a page of one token, one index per token (False, the twin; the same bytes). On the H200 (benchmarks/attn_pages.py)
# the tensor-core decode kernel read the KV 3-4 % faster in pages of 16, the CUDA-core one the same; P1 at page_size
# 16 read 0.634, 0.630, 0.628 of its floor against 0.618, 0.620, 0.618 slot by slot, in alternation (chapter 7)
PAGES = True
# before a wrapper is planned again, wait until the GPU has taken its last plan (True), or not (False, the twin).
# FlashInfer's plan writes the schedule into one page-locked host buffer per wrapper and queues its copy to the GPU;
# a second plan before that copy runs overwrites what the first step then reads. The serving loop is one step ahead,
# so the copy has long run; a caller launching steps back to back (bench.make_decode_batch: prefill groups of two
# shapes in one wrapper) is not. On the H200 `bench_gpu.py p1 p1b` died of an illegal memory access there twice without
# the fence (never under CUDA_LAUNCH_BLOCKING) and ran clean with it; a smaller check did not catch the race either way
PLAN_FENCE = True
# the balanced graphs plan the tensor-core kernel unsplit: one block per (request, KV head), its output written in
# place (True); or as FlashInfer plans any graph (False, the twin): in graph mode its planner calls every plan split,
# so every output goes through a partial buffer and a merge kernel, and a valid-block mask stops the grid's spare
# blocks, although past `split_reqs` (33 for Qwen3) no request's keys are cut: only those graphs go unsplit. With no
# mask the spares compute request 0's block again (clean_schedule zeroed their entries). Session 18's unsplit graphs
# hung, before clean_schedule. On an H100 (session 44) P1 read 0.734 against 0.725, a 192-request replay 9.10 against 9.26 ms
TC_WHOLE = True
# with TC_WHOLE, the spare blocks go to one more lane at the end of each balanced graph, a lane with one key (the dummy
# page) and no query row, where they read one key and write nothing (True); or they stay on request 0 (False, the twin:
# on the H100 its kernel took 375.5 us a layer at 256 requests, against 366.4)
SPARE_LANE = True


def balanced_step(seq_lens: np.ndarray, size: int, kv_bytes_per_token: int, wave_reqs: int = 0) -> bool:
    """Does a decode step of `size` requests (seq_lens: their device_len, then any padding lanes') want the balanced
    kernel? Many requests, a long KV read, and either the longest context at least UNEVEN times the mean or (with
    `wave_reqs`, the requests one wave of the CUDA-core kernel holds) a size just past one wave. Padding lanes do
    not count."""
    lens = seq_lens[:size].astype(np.int64)
    uneven = int(lens.max()) >= UNEVEN * float(lens.mean())
    spills = 0 < wave_reqs < size <= WAVE_SPILL * wave_reqs  # just past one wave of the CUDA-core kernel
    return size >= BALANCED_MIN_BS and (uneven or spills) and \
        int(lens.sum()) * kv_bytes_per_token >= BALANCED_MIN_KV_BYTES


@dataclass
class FIMetadata:
    wrapper: Any  # the planned FlashInfer wrapper every layer runs this step
    args: KernelArgs
    out_loc: torch.Tensor  # int64 once per step, not converted again in every layer's K/V store
    decode: Any = None  # a mixed step: the decode wrapper planned for its first `split` query rows ...
    split: int = 0  # ... and `wrapper` (prefill) takes the rest


class FlashInferBackend(AttentionBackend):
    def __init__(self, kv, pool, num_q_heads: int, workspace_bytes: int = 128 << 20):
        super().__init__(kv, pool)
        import flashinfer  # GPU only: the CPU path never imports it
        self.fi = flashinfer
        _, _, self.kv_heads, self.head_dim = kv.k.shape
        self.q_heads, self.dtype = num_q_heads, kv.k.dtype
        dev = kv.k.device
        # one float workspace for the decode wrappers, one for the prefill ones: a mixed step plans one of each
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=dev)
        prefill_bytes = max(workspace_bytes, split_kv_bytes(num_q_heads, self.kv_heads, self.head_dim, dev))
        self.prefill_workspace = torch.zeros(prefill_bytes, dtype=torch.uint8, device=dev)
        self.use_tensor_cores = num_q_heads // self.kv_heads not in CUDA_CORE_GROUP_SIZES
        self.split_mixed = SPLIT_MIXED  # read by graphs.py too: a one-kernel mixed graph holds the decode rows' keys
        self.side = torch.cuda.Stream(dev) if PARALLEL_MIXED else None  # the decode rows' stream in a mixed step
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.prefill_workspace, "NHD", backend="fa2")
        self.decode_wrapper = self._decode_wrapper()
        self.graph_wrappers: dict[tuple[int, int], Any] = {}  # a graph's (batch size, tokens) -> its wrapper (graphs.py)
        # uneven decode steps: the tensor-core kernel, eager and per graph batch size (where the default is CUDA-core)
        self.balanced = BALANCED_DECODE and not self.use_tensor_cores
        self.balanced_wrapper = self._decode_wrapper(tensor_cores=True) if self.balanced else None
        self.balanced_wrappers: dict[int, Any] = {}  # graph batch size -> its wrapper; graphs.py captures one graph each
        self.wave_reqs = 0  # requests in one wave of the CUDA-core graphs' kernel (the first split plan says; WAVE_BALANCED)
        self.planned: dict[int, torch.cuda.Event] = {}  # id(wrapper) -> recorded after its last plan (PLAN_FENCE)
        self.spare_lanes: dict[int, int] = {}  # id(wrapper) -> its spare lane (SPARE_LANE), while its spares are not on it
        self.spare_sizes: set[int] = set()  # graph sizes whose balanced wrapper has a spare lane
        # each layer's K and V as FlashInfer's pages: [pages, page_size tokens, kv_heads, head_dim] (the same bytes)
        self.page_size = ps = pool.page_size if PAGES else 1  # 1: every slot a page of one token
        self.pages = [(kv.k[i].view(-1, ps, *kv.k.shape[2:]), kv.v[i].view(-1, ps, *kv.v.shape[2:]))
                      for i in range(kv.k.shape[0])]

    def _decode_wrapper(self, bs: int = 0, indices_buf: torch.Tensor | None = None, tensor_cores: bool | None = None,
                        spare_lane: bool = False):
        """bs 0: the eager decode wrapper; bs > 0: one with fixed buffers, for a CUDA graph of that batch size (and,
        with `spare_lane`, of one more lane with no query row: the tensor-core kernel's spare blocks go there)."""
        dev = self.workspace.device
        lanes = bs + spare_lane
        graph = dict(use_cuda_graph=True, paged_kv_indptr_buffer=torch.zeros(lanes + 1, dtype=torch.int32, device=dev),
                     paged_kv_indices_buffer=indices_buf,
                     paged_kv_last_page_len_buffer=torch.ones(lanes, dtype=torch.int32, device=dev)) if bs else {}
        tc = self.use_tensor_cores if tensor_cores is None else tensor_cores
        w = self.fi.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD", use_tensor_cores=tc, backend="fa2", **graph)
        if spare_lane:  # the kernel reads each lane's query rows from this buffer, fixed in graph mode: none for the last
            w._qo_indptr_buf[-1] = bs
            self.spare_lanes[id(w)] = bs
        return clean_schedule(w) if bs else w

    def _prefill_graph_wrapper(self, lanes: int, indices_buf: torch.Tensor):
        """A prefill wrapper with fixed buffers for `lanes` requests (its first plan fixes its total tokens)."""
        i32 = dict(dtype=torch.int32, device=self.workspace.device)
        return clean_schedule(self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self.prefill_workspace, "NHD", backend="fa2", use_cuda_graph=True, qo_indptr_buf=torch.zeros(lanes + 1, **i32),
            paged_kv_indptr_buf=torch.zeros(lanes + 1, **i32), paged_kv_indices_buf=indices_buf,
            paged_kv_last_page_len_buf=torch.ones(lanes, **i32)))

    def add_graph_wrapper(self, bs: int, indices_buf: torch.Tensor, tokens: int = 0, lanes: int = 0) -> None:
        """Wrappers with fixed buffers for a graph (planned before each replay): a decode step of batch size `bs`;
        or (tokens > 0) a prefill step of `lanes` requests and `tokens` query rows after `bs` decode rows."""
        if tokens:  # one prefill kernel for every row: the decode rows are lanes of it too
            self.graph_wrappers[bs, tokens] = self._prefill_graph_wrapper(lanes + (0 if self.split_mixed else bs), indices_buf)
        elif (bs, 0) not in self.graph_wrappers:  # a mixed graph's decode rows share the decode graph's wrapper
            self.graph_wrappers[bs, 0] = self._decode_wrapper(bs, indices_buf)
            if self.balanced and bs >= BALANCED_MIN_BS:
                # unsplit only where a graph's split plan cuts no request's keys anyway: then only the merge goes
                whole = TC_WHOLE and bs > split_reqs(self.kv_heads, self.workspace.device)
                w = self._decode_wrapper(bs, indices_buf, tensor_cores=True, spare_lane=whole and SPARE_LANE)
                w.whole_kv = whole  # our mark on FlashInfer's wrapper: plan it with disable_split_kv (whole_tc)
                self.balanced_wrappers[bs] = w
                if whole and SPARE_LANE:
                    self.spare_sizes.add(bs)

    def prepare(self, batch: Batch) -> None:
        """A prefill step's decode rows (a mixed step: the first `decode_rows` requests, padded to a graph's
        `padded_size`) go through the decode kernel, its prompts through the prefill kernel, each planned once
        from its part of one kernel_args (split_args); or (`split_mixed` False) all of them through the prefill
        kernel, in one plan."""
        if not batch.is_prefill:
            return super().prepare(batch)
        d, graph = batch.decode_rows, batch.padded_tokens > 0
        split = batch.padded_size if graph else d  # query rows of the decode part
        # decode rows, their padding lanes, then the prompt lanes (and theirs): one kernel_args for all of them
        lanes = mixed_lanes(batch.reqs, d, split, self.pool.dummy_row)
        args = kernel_args(lanes, self.pool, split + PREFILL_LANES if graph else 0, split + batch.padded_tokens if graph else 0)
        if not self.split_mixed or not split:  # one plan over every lane
            batch.attn_metadata = self.plan(batch, args)
            return
        decode_args, prompt_args = split_args(args, split, d)
        md = self.plan(batch, prompt_args)
        md.decode = self._plan_decode(decode_args, self.graph_wrappers[split, 0] if graph else self.decode_wrapper)
        md.split = split
        batch.attn_metadata = md

    def lanes(self, batch: Batch) -> int:
        """A decode graph whose balanced wrapper has a spare lane plans one more padding lane (plan drops it for the
        CUDA-core graph)."""
        return batch.padded_size + (not batch.is_prefill and batch.padded_size in self.spare_sizes)

    @contextmanager
    def fenced(self, w):
        """Plan `w` once the GPU has taken its last plan (PLAN_FENCE); note when it takes this one. In the serving
        loop the copy ran long ago, so it does not wait."""
        ev = self.planned.get(id(w)) if PLAN_FENCE else None
        if ev is not None:
            ev.synchronize()
        yield
        if PLAN_FENCE:
            if ev is None:  # one event per wrapper, made at its first plan
                ev = self.planned[id(w)] = torch.cuda.Event()
            ev.record()  # after the plan's copy, on this stream

    def _plan_decode(self, args: KernelArgs, w):
        with self.fenced(w):
            if lean_ready(w, self.page_size):
                lean_plan(w, args, self.q_heads, self.kv_heads, self.head_dim, prefill=False)
            else:
                pg = page_args(args, self.page_size)
                w.plan(pg.indptr, pg.indices, pg.last_page_len, head_dim=self.head_dim, seq_lens=args.seq_lens_k,
                       num_qo_heads=self.q_heads, num_kv_heads=self.kv_heads, page_size=self.page_size,
                       q_data_type=self.dtype, kv_data_type=self.dtype, non_blocking=True,
                       disable_split_kv=whole_tc(w))
        if WAVE_BALANCED and not self.wave_reqs and w.is_cuda_graph_enabled and not w.use_tensor_cores:
            self.wave_reqs = wave_of(w._plan_info)  # every split plan pads to the same wave: learnt once, at capture
        if id(w) in self.spare_lanes:  # its first plan (at capture) sized the grid: its spare blocks to the spare lane
            self.point_spares(w, self.spare_lanes.pop(id(w)))
        return w

    def point_spares(self, w, lane: int) -> None:
        """The grid's spare blocks of `w` (unsplit, tensor-core) read lane `lane`: in the page-locked schedule, which
        later plans copy whole and never write past their real blocks, and in the workspace the first plan filled."""
        grid = prefill_grid(w._plan_info)
        real = grid.real_blocks([1] * (lane + 1), self.q_heads // self.kv_heads)
        torch.cuda.current_stream().synchronize()  # the first plan's copy has left the page-locked buffer
        grid.requests(w._pin_memory_int_workspace_buffer)[real:].fill_(lane)
        grid.requests(w._int_workspace_buffer)[real:].fill_(lane)

    def plan(self, batch: Batch, args: KernelArgs) -> FIMetadata:
        if batch.is_prefill:
            w = self.graph_wrappers.get((batch.padded_size, batch.padded_tokens)) or self.prefill_wrapper
            with self.fenced(w):
                if lean_ready(w, self.page_size):
                    lean_plan(w, args, self.q_heads, self.kv_heads, self.head_dim, prefill=True)
                else:
                    pg = page_args(args, self.page_size)
                    w.plan(args.cu_seqlens_q, pg.indptr, pg.indices, pg.last_page_len,
                           head_dim_qk=self.head_dim, causal=True, seq_lens=args.seq_lens_k,
                           disable_split_kv=w is not self.prefill_wrapper,  # a graph's planner would split every prompt
                           num_qo_heads=self.q_heads, num_kv_heads=self.kv_heads, page_size=self.page_size,
                           q_data_type=self.dtype, kv_data_type=self.dtype, non_blocking=True)
        else:
            pbs = batch.padded_size
            if batch.reqs:  # a real step chooses; a graph's capture (no requests) says which graph it captures
                batch.balanced = self.balanced and (not pbs or pbs in self.balanced_wrappers) and \
                    balanced_step(args.seq_lens_k.numpy(), batch.size, self.kv.bytes_per_token, self.wave_reqs)
            if batch.balanced:
                w = self.balanced_wrappers[pbs] if pbs else self.balanced_wrapper
            else:
                w = self.graph_wrappers.get((pbs, 0)) or self.decode_wrapper
            if pbs in self.spare_sizes and not batch.balanced:
                args = without_last_lane(args)  # the spare lane is the balanced graph's alone
            w = self._plan_decode(args, w)
        out_loc = batch.out_loc if batch.out_loc.dtype == torch.int64 else batch.out_loc.long()
        return FIMetadata(w, args, out_loc)

    def forward(self, q, k, v, layer, batch):
        md: FIMetadata = batch.attn_metadata
        if fused_kernels(k) is not None and (kv := side_by_side(k, v)) is not None:
            self.kv.store_kv(layer, md.out_loc, kv)  # K and V in one copy
        else:
            self.kv.store(layer, md.out_loc, k, v)
        return self.attend(q, layer, batch)

    def attend(self, q, layer, batch):
        """Attention over K/V already in the pool (the model's one-launch kernel stored them)."""
        md = batch.attn_metadata
        if not md.split:
            return md.wrapper.run(q, self.pages[layer])
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # both kernels write their rows into one output
        if self.side is None:
            md.decode.run(q[:md.split], self.pages[layer], out=out[:md.split])
            md.wrapper.run(q[md.split:], self.pages[layer], out=out[md.split:])
            return out
        main = torch.cuda.current_stream(q.device)
        self.side.wait_stream(main)  # q, out and this layer's K/V are ready (in a graph: the fork)
        with torch.cuda.stream(self.side):
            md.decode.run(q[:md.split], self.pages[layer], out=out[:md.split])
        md.wrapper.run(q[md.split:], self.pages[layer], out=out[md.split:])
        main.wait_stream(self.side)  # the join: o_proj reads every row (a graph capture fails without it)
        return out

    def store_locations(self, batch) -> torch.Tensor:
        """This step's out_loc as int64, for a kernel that writes K/V into the pool itself."""
        return batch.attn_metadata.out_loc


def clean_schedule(w):
    """A CUDA graph's wrapper with its page-locked schedule buffer zeroed, once, before its first plan. In a graph,
    FlashInfer's prefill planner without split-KV sizes the grid for the most query tiles the rows could make
    (padded_batch_size) but writes the request and tile of the real ones only; the spare blocks read what the buffer
    held before. A page-locked block a dead wrapper left holds another plan's numbers: request indices far outside
    the batch, and an illegal memory access (session 41). Zeros send the spare blocks to request 0's first tile,
    which they compute again; later plans leave their own earlier entries, requests within the fixed batch."""
    w._pin_memory_int_workspace_buffer.zero_()
    return w


def whole_tc(w) -> bool:
    """Does `w` plan the tensor-core kernel unsplit (TC_WHOLE: a balanced graph's wrapper past split_reqs)?"""
    return getattr(w, "whole_kv", False)


def wave_of(plan_info) -> int:
    """Requests in one wave of the CUDA-core decode kernel, from a CUDA-graph plan that split keys (0 if it did not).
    Such a plan pads its grid to one whole wave: padded_batch_size = the grid's CTAs / KV heads (FlashInfer 0.5's
    DecodePlanInfo: [padded_batch_size, ..., enable_cuda_graph, split_kv])."""
    info = [int(v) for v in plan_info]
    return info[0] if len(info) == 10 and info[8] and info[9] else 0


@dataclass(frozen=True)
class PrefillGrid:
    """A planned prefill wrapper's grid, read from FlashInfer 0.5's PrefillPlanInfo: [padded_batch_size, ...,
    cta_tile_q at 3, request_indices_offset at 4, qo_tile_indices_offset at 5, ..., split_kv at 14]. Each block of
    the grid reads its (request, query tile) from the int workspace at those byte offsets."""
    blocks: int  # the grid's blocks: the most query tiles the rows could make
    tile_rows: int  # one query tile: rows x query heads of one KV head
    request_off: int  # byte offset of the blocks' request indices (int32 each)
    tile_off: int  # byte offset of the blocks' query-tile indices
    split: bool = False  # keys split into chunks: partial outputs, a merge, and (in a graph) a valid-block mask

    def real_blocks(self, lens: list[int], group: int) -> int:
        """Blocks that hold a tile of some lane's rows (lens: each lane's query rows); the rest are spare."""
        return sum(-(-n * group // self.tile_rows) for n in lens)

    def requests(self, ws: torch.Tensor) -> torch.Tensor:
        """Each block's request index, a view into the int workspace (bytes) `ws`: writing it re-points blocks."""
        return ws[self.request_off:self.request_off + 4 * self.blocks].view(torch.int32)

    def tiles(self, ws: torch.Tensor) -> torch.Tensor:
        """Each block's query-tile index, a view into `ws` as requests()."""
        return ws[self.tile_off:self.tile_off + 4 * self.blocks].view(torch.int32)


def prefill_grid(plan_info) -> PrefillGrid:
    info = [int(v) for v in plan_info]
    return PrefillGrid(blocks=info[0], tile_rows=info[3], request_off=info[4], tile_off=info[5], split=bool(info[14]))


def lean_ready(w, page_size: int = 1) -> bool:
    """May `w` be re-planned by `lean_plan`? A CUDA graph's wrapper (its buffers fixed) that plan() has planned once
    (at capture: that first plan chose its kernel module and fixed its row capacity), over pages of one token (the
    lean plan leaves the last-page lengths at one)."""
    return LEAN_PLAN and page_size == 1 and w.is_cuda_graph_enabled and getattr(w, "_plan_info", None) is not None


def lean_plan(w, args: KernelArgs, q_heads: int, kv_heads: int, head_dim: int, prefill: bool) -> None:
    """What FlashInfer's plan() does for a CUDA graph's wrapper over page_size-1 pages, and nothing else: this step's
    prefix sums and slots into the wrapper's fixed buffers (the last-page lengths are ones for good: every page holds
    one token), then the host planner, which writes its schedule into the workspace. The args are plan()'s own, in
    the order its C++ planner takes them (FlashInfer 0.5's prefill.py and decode.py); `tests/gpu` compares the
    buffers and the workspace bit for bit with plan()'s."""
    n = len(args.kv_indices)
    w._paged_kv_indptr_buf.copy_(args.cu_seqlens_k, non_blocking=True)
    w._paged_kv_indices_buf[:n].copy_(args.kv_indices, non_blocking=True)
    ws = (w._float_workspace_buffer, w._int_workspace_buffer, w._pin_memory_int_workspace_buffer)
    b = len(args.seq_lens_k)
    if prefill:  # a prefill graph: causal, split-KV off (plan()'s disable_split_kv for graph wrappers)
        w._qo_indptr_buf.copy_(args.cu_seqlens_q, non_blocking=True)
        w._kv_lens_buffer[:b].copy_(args.seq_lens_k, non_blocking=True)
        w._plan_info = w._cached_module.plan(*ws, args.cu_seqlens_q, args.cu_seqlens_k, args.seq_lens_k,
                                             w._max_total_num_rows, b, q_heads, kv_heads, 1, True, head_dim, head_dim,
                                             True, -1, -1, True, 0)
    elif w.use_tensor_cores:  # a decode graph through the prefill kernel, one query per request
        w._plan_info = w._cached_module.plan(*ws, qo_range(b), args.cu_seqlens_k, args.seq_lens_k, b, b, q_heads,
                                             kv_heads, 1, True, head_dim, head_dim, False, -1, -1, whole_tc(w), 0)
    else:  # the CUDA-core decode kernel
        w._plan_info = w._cached_module.plan(*ws, args.cu_seqlens_k, b, q_heads, kv_heads, 1, True, -1, 0.0, head_dim,
                                             head_dim, *empty_of(w._cached_q_data_type, w._cached_kv_data_type))


_QO_RANGES: dict[int, torch.Tensor] = {}
_EMPTIES: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def qo_range(b: int) -> torch.Tensor:
    """[0, 1, ..., b] int32 on the host: one query per request (the tensor-core decode plan's qo prefix sums)."""
    if b not in _QO_RANGES:
        _QO_RANGES[b] = torch.arange(b + 1, dtype=torch.int32)
    return _QO_RANGES[b]


def empty_of(q_dtype: torch.dtype, kv_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The CUDA-core decode planner takes its dtypes as empty tensors: made once, not in every plan."""
    if (q_dtype, kv_dtype) not in _EMPTIES:
        _EMPTIES[q_dtype, kv_dtype] = torch.empty(0, dtype=q_dtype), torch.empty(0, dtype=kv_dtype)
    return _EMPTIES[q_dtype, kv_dtype]


def split_reqs(kv_heads: int, device) -> int:
    """The most one-query requests FlashInfer 0.5's prefill planner can cut into chunks: it cuts keys only while the
    blocks fit 2 CTAs per SM, kv_heads a request (max_batch_size_if_split in its scheduler.cuh; 33 for Qwen3's 8 KV
    heads on 132 SMs)."""
    return 2 * torch.cuda.get_device_properties(device).multi_processor_count // kv_heads


def split_kv_bytes(q_heads: int, kv_heads: int, head_dim: int, device) -> int:
    """The most FlashInfer's eager prefill planner asks of the float workspace for split-KV partial outputs:
    float32 values and log-sum-exps of 128-row query tiles for every head, up to 2 CTAs per SM (its
    scheduler.cuh), plus 16 MiB for alignment and the rest (32 q heads over 4 KV heads overflow 128 MiB)."""
    return q_heads * split_reqs(kv_heads, device) * 128 * (head_dim + 1) * 4 + (16 << 20)


def side_by_side(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """[2, tokens, heads, head_dim] view of K and V when V's columns follow K's in one buffer (the
    q|k|v projection's output, with q/k norm and RoPE done in place), else None."""
    n, heads, d = k.shape
    if k.stride(1) != d or k.stride(2) != 1 or v.stride() != k.stride() or \
            v.data_ptr() != k.data_ptr() + heads * d * k.element_size():
        return None
    return k.as_strided((2, n, heads, d), (heads * d, k.stride(0), d, 1))
