"""Sampling the next token per request: greedy, temperature, top-k, top-p — on the device, batched,
with no host synchronisation (the tensors of parameters travel with non-blocking copies)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .paging import to_device
from .req import Req


@dataclass
class SamplingTensors:
    temperature: torch.Tensor  # [B] float32; 0 = greedy
    top_k: torch.Tensor  # [B] int64; vocab size = off
    top_p: torch.Tensor  # [B] float32
    all_greedy: bool
    needs_filter: bool
    seeds: list[tuple[int, int]]  # (batch row, per-request seed mixed with the position)

    @staticmethod
    def from_reqs(reqs: list[Req], vocab: int, device: torch.device) -> "SamplingTensors":
        sp = [r.sampling for r in reqs]
        all_greedy = all(p.temperature == 0 for p in sp)
        t = np.array([p.temperature for p in sp], np.float32)  # numpy first: ~10x cheaper than torch.tensor(list)
        k = np.array([p.top_k if p.top_k > 0 else vocab for p in sp], np.int64)
        p = np.array([p.top_p for p in sp], np.float32)
        seeds = [(i, (r.sampling.seed * 1_000_003 + r.device_len) % (1 << 63))
                 for i, r in enumerate(reqs) if r.sampling.seed is not None and r.sampling.temperature > 0]
        needs_filter = any(q.top_k > 0 or q.top_p < 1 for q in sp if q.temperature > 0)
        dev = lambda x: to_device(x, device)  # pinned + non-blocking on CUDA: no host sync inside the step
        return SamplingTensors(dev(t), dev(k), dev(p), all_greedy, needs_filter, seeds)


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
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p.masked_fill(drop, 0.0))
    # exponential race: argmax(p_i / E_i) with E_i ~ Exp(1) picks i with probability p_i
    noise = torch.empty_like(probs).exponential_(generator=generator)
    for row, seed in st.seeds:  # a seeded request draws its own noise: same seed, same tokens
        g = torch.Generator(device=probs.device).manual_seed(seed)
        noise[row].exponential_(generator=g)
    tokens = (probs / noise).argmax(dim=-1)
    return torch.where(st.temperature > 0, tokens, greedy_tokens).to(torch.int32)
