"""One rank's engine: the model, its KV pool and page table, an attention backend and a sampler.

It turns a `Batch` (chapter 2) into next tokens; `prepare()` is chapter 7's ledger to kernel arguments.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from .attention import make_backend
from .config import EngineConfig, host_threads_for  # noqa: F401  (EngineConfig re-exported)
from .model import build_model, load_config
from .model import qk_kernel
from .model.layers import fused_kernels, use_kernels
from .paging import KVCache, PagePool, extend_spans, next_token_slots, to_device
from .req import Batch
from .sampling import SamplingCache, SamplingTensors, apply_controls, sample, token_logprobs
from .tp import min_over_ranks
from .trace import Timeline

log = logging.getLogger("minisgl_edu")


class Engine:
    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.device = torch.device(cfg.device)  # resolved by EngineConfig
        use_kernels(cfg.fused_kernels, cfg.qk_kernel, cfg.moe_impl, cfg.gemv_kernel, cfg.pdl, cfg.skinny_gemm)  # one engine per process decides for its layers
        if (threads := host_threads_for(cfg, self.device.type)) is not None:  # the rule and its why: config.py
            torch.set_num_threads(threads)
        self.dtype = cfg.dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.model_config = mc = load_config(cfg.model_path)
        self.max_seq_len = min(cfg.max_seq_len or mc.max_position_embeddings, mc.max_position_embeddings)
        self.model = build_model(mc, self.device, self.dtype, self.max_seq_len, cfg.model_path,
                                 cfg.dummy_weights, cfg.seed)
        self.vocab_size = mc.vocab_size
        attn = self.model.layers[0].self_attn
        num_pages = self._num_pages(attn.kv_heads * attn.head_dim * 2 * mc.num_hidden_layers)
        self.kv = KVCache(mc.num_hidden_layers, num_pages, cfg.page_size, attn.kv_heads, attn.head_dim,
                          self.dtype, self.device)
        self.pool = PagePool(num_pages, cfg.page_size, cfg.max_running_reqs, self.max_seq_len, self.device)
        name = cfg.attention or ("flashinfer" if self.device.type == "cuda" else "reference")
        self.backend = make_backend(name, self.kv, self.pool, num_q_heads=attn.q_heads)  # FlashInfer plans with it
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.eos_token_ids: tuple[int, ...] = ()  # set by the Scheduler: min_tokens masks them
        # chapter 6: the forward runs on its own stream, so the scheduler's stream can prepare step N+1
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.lean_step = cfg.lean_step  # an attribute: a benchmark may flip it on a running engine (graphs stay valid)
        self.layout: StepLayout | None = None  # this step's arrays on the device (lean_step; set by prepare)
        self.sampling_cache = SamplingCache()  # lean_step: the decode batch's sampling tensors, reused while it lasts
        self.timeline: Timeline | None = None  # set to Timeline(device) to record every forward's times
        self.logits_hook = None  # called with each step's logits of the sampled rows (a BatchRecorder's)
        self.graphs = None
        if self.device.type != "cuda" or cfg.cuda_graph_max_bs <= 0:
            log.info("CUDA graphs off: %s", "no CUDA device" if self.device.type != "cuda" else "--cuda-graph-max-bs 0")
        else:
            from .graphs import GraphRunner
            self.graphs = GraphRunner(self, cfg.cuda_graph_max_bs)
        if self.device.type == "cuda" and cfg.warm_start:
            self.warm_up_logits()

    @torch.inference_mode()
    def warm_up_logits(self) -> None:
        """Run the LM head and the argmax once at every row count a step can sample (1..max_running_reqs).
        cuBLAS picks another kernel as the row count grows, and CUDA loads a kernel on its first launch: served,
        the first step that samples 9, 17, 25, ... rows stalled 3-10 ms (H200 step traces). Now it happens here."""
        h = torch.zeros(self.cfg.max_running_reqs, self.model_config.hidden_size, dtype=self.dtype, device=self.device)
        with self.on_stream():  # the stream the steps' LM head runs on
            for m in range(1, len(h) + 1):
                self.model.logits(h[:m]).argmax(dim=-1)
        torch.cuda.synchronize(self.device)

    def _num_pages(self, bytes_per_token: int) -> int:
        ps, elem = self.cfg.page_size, torch.finfo(self.dtype).bits // 8
        if self.cfg.max_total_tokens:
            tokens = self.cfg.max_total_tokens
        elif self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            tokens = int(free * self.cfg.memory_fraction) // (bytes_per_token * elem)
        else:
            tokens = 32768
        return max(1, min_over_ranks(tokens) // ps)  # chapter 8: every rank the same pool, so the same decisions

    # ---- chapter 7: the ledger becomes kernel arguments ------------------------------------------
    def prepare(self, batch: Batch) -> np.ndarray:
        """Fill the batch's kernel arguments; return the flat row of each sampled request's last new token."""
        if not self.lean_step:
            return self._prepare_plain(batch)
        lay = step_layout(batch, self.device)
        batch.positions, batch.sample_rows = lay.positions, lay.sample_rows
        batch.input_ids = self.pool.token_pool[lay.rows, lay.positions]
        self.backend.prepare(batch)
        self.layout = lay
        return lay.last

    def _prepare_plain(self, batch: Batch) -> np.ndarray:
        """The plain twin of `prepare` (lean_step=False): one host-to-device copy per array."""
        reqs = batch.reqs
        _, ext, rows, pos = extend_spans(reqs)
        to_dev = lambda a: to_device(a, self.device)
        batch.positions = to_dev(pos)
        batch.input_ids = self.pool.token_pool[to_dev(rows), batch.positions]
        batch.sample_rows = [i for i, r in enumerate(reqs) if not r.is_chunked]
        self.backend.prepare(batch)
        self.layout = None
        return (np.cumsum(ext) - 1)[batch.sample_rows]

    @contextmanager
    def on_stream(self, wait: bool = True):
        """Run the enclosed work on the engine stream, after what the caller's stream queued so far.
        wait=True: the caller's stream then waits for it (GPU-side; the CPU never blocks here)."""
        if self.stream is None:
            yield
            return
        caller = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(caller)  # out_loc and page-table writes of the scheduler stream come first
        with torch.cuda.stream(self.stream):
            yield
        if wait:
            caller.wait_stream(self.stream)

    @torch.inference_mode()
    def forward(self, batch: Batch, wait: bool = True) -> torch.Tensor:
        """Run one step; return the sampled tokens of `batch.sample_rows` (also written to the token pool).
        On CUDA it runs on `self.stream`: read the tokens through `to_host()` if wait=False (the overlap loop)."""
        with self.on_stream(wait), self.timeline.step() if self.timeline is not None else nullcontext():
            tokens = self._forward(batch)
        if wait and self.stream is not None:
            tokens.record_stream(torch.cuda.current_stream(self.device))  # used there: not reused before
        return tokens

    def to_host(self, tokens: torch.Tensor):
        """Start copying step N's tokens to the host; return (host tensor, copy-done event or None)."""
        if self.stream is None:
            return tokens, None
        with torch.cuda.stream(self.stream):
            host = tokens.to("cpu", non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        return host, event

    def _forward(self, batch: Batch) -> torch.Tensor:
        key = self.graphs.key(batch) if self.graphs is not None else None  # the graph this step fits, or None
        if key is not None:  # (decode rows, prompt rows) padded to a captured graph's
            batch.padded_size, batch.padded_tokens = key
        last = self.prepare(batch)  # with padded_size set, the backend plans the graph's wrapper
        lay, head = self.layout, None
        sampled = [batch.reqs[i] for i in batch.sample_rows]
        # where the sampled requests' next tokens go in the token pool: (page-table rows, device_len)
        at = (lay.sample_table_rows, lay.sample_device_len) if lay is not None else \
            next_token_slots(sampled, self.device) if sampled else None
        if key is None:
            h = self.model(batch.input_ids, batch.positions, self.backend, batch)
        elif batch.padded_tokens:
            h = self.graphs.replay_prefill(batch)
        else:  # a decode graph; with the head it also leaves the logits and the greedy tokens (in the token pool too)
            h = self.graphs.replay(batch, at)
            head = self.graphs.head_out(batch)
        if not sampled:
            return torch.zeros(0, dtype=torch.int32, device=self.device)
        if lay is None:  # the plain step
            st = SamplingTensors.from_reqs(sampled, self.vocab_size, self.device, self.eos_token_ids, self.pool.token_pool)
            logits = head[0] if head is not None else self.model.logits(h[to_device(last, self.device)])
        else:
            st = self.sampling_cache.get(sampled, self.vocab_size, self.device, self.eos_token_ids, self.pool.token_pool)
            logits = head[0] if head is not None else self.model.logits(h if lay.last_rows is None else h[lay.last_rows])
        if self.logits_hook is not None:
            self.logits_hook(logits)
        if lay is None:
            logits = logits.float()
        else:  # one argmax on the model's own logits when nothing needs them in float32 (same index)
            if st.plain_greedy and head is not None and head[1] is not None:
                return head[1].clone()  # the graph's argmax, already in the token pool; a copy outlives the next replay
            if st.plain_greedy and fused_kernels(logits) is not None and (tokens := qk_kernel.greedy(
                    logits, lay.sample_table_rows, lay.sample_device_len, self.pool.token_pool)) is not None:
                return tokens  # the argmax, its int32 and the token pool's write in one launch (greedy.cu)
            logits = logits if st.plain_greedy else logits.float()
        tokens = sample(apply_controls(logits, st, self.pool.token_pool), st, self.generator)
        if st.logprobs_k >= 0:  # chapter 9: read from the raw logits; they ride back with the tokens (no sync)
            batch.logprobs = token_logprobs(logits, tokens, st.logprobs_k).to_host()
        rows, pos = at
        self.pool.token_pool[rows, pos] = tokens  # step N+1 reads its input ids from here
        return tokens


@dataclass
class StepLayout:
    """One step's per-token and per-sampled-request arrays, sent to the device in one copy (lean_step)."""
    rows: torch.Tensor  # [T] int64: page-table row of each new token
    positions: torch.Tensor  # [T] int64
    sample_rows: list[int]  # batch rows that produce a token
    sample_table_rows: torch.Tensor  # [S] int64: their page-table rows ...
    sample_device_len: torch.Tensor  # [S] int64: ... and where their next token goes in the token pool
    last: np.ndarray  # [S] host: flat row of each sampled request's last new token
    last_rows: torch.Tensor | None  # [S] the same on the device; None when it is every row in order (decode)


def step_layout(batch: Batch, device: torch.device) -> StepLayout:
    """`extend_spans` + the sampled rows of `batch`, in NumPy, and one host-to-device copy for all of it."""
    reqs, n = batch.reqs, batch.size
    table = np.fromiter((r.table_idx for r in reqs), np.int64, n)
    cached = np.fromiter((r.cached_len for r in reqs), np.int64, n)
    dev_len = np.fromiter((r.device_len for r in reqs), np.int64, n)
    if batch.is_prefill:
        _, ext, rows, pos = extend_spans(reqs)
        sample = [i for i, r in enumerate(reqs) if not r.is_chunked]
        last = (np.cumsum(ext) - 1)[sample]
    else:  # one new token per request, at position cached_len, and every request is sampled
        rows, pos, sample, last = table, cached, list(range(n)), np.arange(n)
    identity = len(last) == len(rows)  # then last == arange: no gather
    flat = to_device(np.concatenate([rows, pos, table[sample], dev_len[sample], last[:0] if identity else last]), device)
    t, s = len(rows), len(sample)
    return StepLayout(flat[:t], flat[t:2 * t], sample, flat[2 * t:2 * t + s], flat[2 * t + s:2 * t + 2 * s], last,
                      None if identity else flat[2 * t + 2 * s:])
