"""Chapter 9 — Sampling: greedy, temperature, top-k, top-p, min-p, batched on the device, no host sync.

The controls (logit_bias, min_tokens, the grammar mask, penalties) run before the draw; the
penalties count tokens in the device's token pool, which under overlap scheduling (chapter 6)
already holds the token the host has not seen yet.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .grammar import allowed_mask
from .paging import to_device
from .req import Req


@dataclass
class Penalties:
    """Per-row penalty parameters and where each row's tokens sit in the token pool."""
    rows: torch.Tensor  # [B] int64: token-pool row of each batch row
    prompt_len: torch.Tensor  # [B] int64
    device_len: torch.Tensor  # [B] int64: positions [0, device_len) hold tokens
    max_len: int  # max(device_len): how many pool columns to read
    presence: torch.Tensor  # [B] float32
    frequency: torch.Tensor  # [B] float32
    repetition: torch.Tensor  # [B] float32


@dataclass
class SamplingTensors:
    temperature: torch.Tensor | None  # [B] float32; 0 = greedy (None when every row is greedy: nothing reads them)
    top_k: torch.Tensor | None  # [B] int64; vocab size = off
    top_p: torch.Tensor | None  # [B] float32
    all_greedy: bool
    needs_filter: bool
    seeds: list[tuple[int, int]]  # (batch row, per-request seed mixed with the position)
    min_p: torch.Tensor | None = None  # [B] float32, None when no request uses it
    penalties: Penalties | None = None
    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (rows, token ids, added value)
    banned: tuple[torch.Tensor, torch.Tensor] | None = None  # (rows, token ids) set to -inf (min_tokens)
    logprobs_k: int = -1  # -1: no request wants logprobs; else the most top alternatives any row asked for
    allowed: torch.Tensor | None = None  # [B, V] bool: the grammar masks of constrained rows (chapter 9)

    @staticmethod
    def from_reqs(reqs: list[Req], vocab: int, device: torch.device, eos_token_ids: tuple[int, ...] = (),
                  token_pool: torch.Tensor | None = None) -> "SamplingTensors":
        sp = [r.sampling for r in reqs]
        all_greedy = all(p.temperature == 0 for p in sp)
        dev = lambda x: to_device(x, device)  # pinned + non-blocking on CUDA: no host sync inside the step
        if all_greedy:  # an argmax reads none of them: no copies (each one is a pin and a launch on CUDA)
            st = SamplingTensors(None, None, None, True, False, [])
        else:
            t = np.array([p.temperature for p in sp], np.float32)  # numpy first: ~10x cheaper than torch.tensor(list)
            k = np.array([p.top_k if p.top_k > 0 else vocab for p in sp], np.int64)
            p = np.array([p.top_p for p in sp], np.float32)
            seeds = [(i, (r.sampling.seed * 1_000_003 + r.device_len) % (1 << 63))
                     for i, r in enumerate(reqs) if r.sampling.seed is not None and r.sampling.temperature > 0]
            needs_filter = any(q.top_k > 0 or q.top_p < 1 or q.min_p > 0 for q in sp if q.temperature > 0)
            st = SamplingTensors(dev(t), dev(k), dev(p), False, needs_filter, seeds)
        if not all_greedy and any(q.min_p > 0 for q in sp):  # read only when sampling
            st.min_p = dev(np.array([q.min_p for q in sp], np.float32))
        if any(q.needs_penalties for q in sp):
            st.penalties = _penalties(reqs, dev)
        st.bias, st.banned = _sparse_edits(reqs, eos_token_ids, dev)
        st.logprobs_k = max((q.logprobs for q in sp if q.logprobs is not None), default=-1)
        if token_pool is not None and any(r.grammar is not None for r in reqs):
            mask = allowed_mask(reqs, vocab, token_pool)
            st.allowed = mask if device.type != "cuda" else mask.pin_memory().to(device, non_blocking=True)
        return st

    @property
    def plain_greedy(self) -> bool:
        """Greedy with no control and no logprobs: only the argmax of the logits matters, in any dtype."""
        return self.all_greedy and self.logprobs_k < 0 and self.bias is None and self.banned is None and \
            self.penalties is None and self.allowed is None


def plain_greedy(r: Req) -> bool:
    """Whether `r`'s row needs only the argmax for its whole life: greedy, and no control or logprobs reads the
    logits (decided at its first step and kept on the request: a batch's check is then one pass)."""
    if r.plain is None:
        p = r.sampling
        r.plain = p.temperature == 0 and not p.logit_bias and p.min_tokens == 0 and p.logprobs is None and \
            not p.needs_penalties and p.json_schema is None
    return r.plain


def per_step(r: Req) -> bool:
    """Whether `r`'s sampling tensors change from step to step: a seed mixed with the position, penalties over
    its tokens so far, a min_tokens ban that lifts, a grammar mask."""
    p = r.sampling
    return (p.seed is not None and p.temperature > 0) or p.needs_penalties or p.min_tokens > 0 or r.grammar is not None


@dataclass
class SamplingCache:
    """The last batch's SamplingTensors, reused while the same requests are sampled and none is `per_step`
    (a decode batch keeps its requests for many steps: no host loop and no copies then)."""
    reqs: list[Req] = field(default_factory=list)
    st: SamplingTensors | None = None

    def get(self, reqs: list[Req], vocab: int, device: torch.device, eos_token_ids: tuple[int, ...] = (),
            token_pool: torch.Tensor | None = None) -> SamplingTensors:
        if self.st is not None and self.reqs == reqs:  # Req compares by identity: one C-level pass
            return self.st
        if all(map(plain_greedy, reqs)):  # the common batch: an argmax needs no tensor, whoever joined
            self.reqs, self.st = list(reqs), SamplingTensors(None, None, None, True, False, [])
            return self.st
        st = SamplingTensors.from_reqs(reqs, vocab, device, eos_token_ids, token_pool)
        self.reqs, self.st = ([], None) if any(map(per_step, reqs)) else (list(reqs), st)
        return st


def _penalties(reqs: list[Req], dev) -> Penalties:
    col = lambda f, dt: dev(np.array([f(r) for r in reqs], dt))
    return Penalties(col(lambda r: r.table_idx, np.int64), col(lambda r: r.prompt_len, np.int64),
                     col(lambda r: r.device_len, np.int64), max(r.device_len for r in reqs),
                     col(lambda r: r.sampling.presence_penalty, np.float32),
                     col(lambda r: r.sampling.frequency_penalty, np.float32),
                     col(lambda r: r.sampling.repetition_penalty, np.float32))


def _sparse_edits(reqs: list[Req], eos: tuple[int, ...], dev):
    """logit_bias as (row, token, value) triples; min_tokens as (row, token) pairs to ban (EOS + stop ids)."""
    bias = [(i, tok, b) for i, r in enumerate(reqs) for tok, b in r.sampling.logit_bias]
    ban = [(i, tok) for i, r in enumerate(reqs) if r.device_len - r.prompt_len < r.sampling.min_tokens
           for tok in (*eos, *r.sampling.stop_token_ids)]
    as_dev = lambda cols, dts: tuple(dev(np.array(c, dt)) for c, dt in zip(cols, dts))
    return (as_dev(zip(*bias), (np.int64, np.int64, np.float32)) if bias else None,
            as_dev(zip(*ban), (np.int64, np.int64)) if ban else None)


def apply_controls(logits: torch.Tensor, st: SamplingTensors, token_pool: torch.Tensor) -> torch.Tensor:
    """logits [B, V] -> logits after logit_bias, the min_tokens ban and the penalties (a new tensor)."""
    if st.bias is None and st.banned is None and st.penalties is None and st.allowed is None:
        return logits
    logits = logits.clone()  # the raw logits stay as they are: logprobs are read from them
    if st.bias is not None:
        rows, toks, vals = st.bias
        logits.index_put_((rows, toks), vals, accumulate=True)
    if st.banned is not None:
        logits[st.banned] = float("-inf")
    if st.allowed is not None:
        logits.masked_fill_(~st.allowed, float("-inf"))
    if st.penalties is not None:
        logits = penalise(logits, st.penalties, token_pool)
    return logits


def penalise(logits: torch.Tensor, pen: Penalties, token_pool: torch.Tensor) -> torch.Tensor:
    """transformers' repetition penalty over prompt + output, then OpenAI's presence and frequency penalties
    over the output, all from the token pool (so the token still in flight is counted too)."""
    pos = torch.arange(pen.max_len, device=logits.device)[None, :]
    hist = token_pool[pen.rows, :pen.max_len].long().clamp_(0, logits.shape[-1] - 1)  # [B, L]
    held = (pos < pen.device_len[:, None]).float()
    counts = torch.zeros_like(logits).scatter_add_(1, hist, held * (pos >= pen.prompt_len[:, None]))
    seen = torch.zeros_like(logits).scatter_add_(1, hist, held) > 0
    rep = pen.repetition[:, None]
    logits = torch.where(seen, torch.where(logits > 0, logits / rep, logits * rep), logits)
    return logits - pen.frequency[:, None] * counts - pen.presence[:, None] * (counts > 0)


def sample(logits: torch.Tensor, st: SamplingTensors, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits [B, V] float32 -> token ids [B] int32."""
    greedy_tokens = logits.argmax(dim=-1)
    if st.all_greedy:
        return greedy_tokens.to(torch.int32)
    temp = torch.where(st.temperature > 0, st.temperature, torch.ones_like(st.temperature))
    probs = torch.softmax(logits / temp[:, None], dim=-1)
    if st.needs_filter:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        rank = torch.arange(probs.shape[-1], device=probs.device)[None, :]
        drop = rank >= st.top_k[:, None]  # top-k
        drop |= (sorted_p.cumsum(-1) - sorted_p) >= st.top_p[:, None]  # top-p: keep until the mass reaches p
        if st.min_p is not None:  # min-p: below min_p * the top probability (sorted_p[:, 0])
            drop |= sorted_p < st.min_p[:, None] * sorted_p[:, :1]
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p.masked_fill(drop, 0.0))
    # exponential race: argmax(p_i / E_i) with E_i ~ Exp(1) picks i with probability p_i
    noise = torch.empty_like(probs).exponential_(generator=generator)
    for row, seed in st.seeds:  # a seeded request draws its own noise: same seed, same tokens
        g = torch.Generator(device=probs.device).manual_seed(seed)
        noise[row].exponential_(generator=g)
    tokens = (probs / noise).argmax(dim=-1)
    return torch.where(st.temperature > 0, tokens, greedy_tokens).to(torch.int32)


@dataclass
class Logprobs:
    """The model's log-probabilities behind each sampled token: the chosen one and the k most likely."""
    chosen: torch.Tensor  # [B] float32
    top_ids: torch.Tensor  # [B, k] int64
    top_values: torch.Tensor  # [B, k] float32

    def to_host(self) -> "Logprobs":
        """Start the copies to the host on the current stream (non-blocking: the step's copy-done event covers
        them); on the CPU the tensors are already there."""
        if self.chosen.device.type == "cpu":
            return self
        return Logprobs(*(t.to("cpu", non_blocking=True) for t in (self.chosen, self.top_ids, self.top_values)))

    def row(self, i: int, k: int) -> tuple[float, list[int], list[float]]:
        return float(self.chosen[i]), self.top_ids[i, :k].tolist(), self.top_values[i, :k].tolist()


def token_logprobs(raw_logits: torch.Tensor, tokens: torch.Tensor, k: int) -> Logprobs:
    """Log-softmax of the model's raw logits (before bias, penalties and temperature) at the sampled tokens."""
    logp = torch.log_softmax(raw_logits.float(), dim=-1)
    top = logp.topk(k, dim=-1) if k > 0 else None
    empty = logp[:, :0]
    return Logprobs(logp.gather(1, tokens.long()[:, None])[:, 0],
                    top.indices if top is not None else empty.long(), top.values if top is not None else empty)
