"""Chapter 2 — Req and Batch: how far has each request got?

A request is a ledger of three lengths over its token sequence:

    position:  0 ........ cached_len ........ device_len ........ max_device_len
               | KV computed | this step extends |  still to generate   |
               |<----------->|<-- extend_len --->|                      |

* `cached_len`     — tokens whose K/V already sit in the KV pool (computed, or matched in the radix cache)
* `device_len`     — tokens that will be on the device after this step (prompt so far + sampled tokens)
* `max_device_len` — prompt + max_tokens: the most this request can ever hold

Invariant: 0 <= cached_len < device_len <= max_device_len. A decode step extends by exactly one
token; `complete_one()` then moves the window: cached_len = device_len; device_len += 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch


@dataclass
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = -1  # -1 = whole vocabulary
    top_p: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
    seed: int | None = None  # per-request seed: same seed, same tokens, whatever the batch

    def validate(self) -> None:
        """Raise ValueError with a clear message for values no engine could honour."""
        t = self.temperature
        if not isinstance(t, (int, float)) or math.isnan(t) or math.isinf(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or (self.top_k < 1 and self.top_k != -1):
            raise ValueError(f"top_k must be -1 (off) or an integer >= 1, got {self.top_k!r}")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be an integer > 0, got {self.max_tokens!r}")


@dataclass(eq=False)
class Req:
    uid: int
    token_ids: list[int]  # host copy: prompt, then every sampled token appended
    sampling: SamplingParams
    prompt_len: int = 0
    table_idx: int = -1  # row of the page table / token pool this request owns while running
    cached_len: int = 0
    device_len: int = 0
    max_device_len: int = 0
    cache_handle: Any = None  # the radix node its matched prefix is locked through
    matched_len: int = 0  # how much of the prompt came from the prefix cache (page-aligned)
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    clamped: bool = False  # max_tokens was cut to fit the context

    def __post_init__(self) -> None:
        self.prompt_len = self.prompt_len or len(self.token_ids)
        self.max_device_len = self.max_device_len or self.prompt_len + self.sampling.max_tokens

    @property
    def extend_len(self) -> int:
        return self.device_len - self.cached_len

    @property
    def remain_len(self) -> int:
        """Tokens this request may still add to the KV pool (the adder reserves them as pages: `pages_to_finish`)."""
        return self.max_device_len - self.device_len

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len:]

    @property
    def is_chunked(self) -> bool:
        """A prefill that stops short of the prompt's end: nothing is sampled for it this step."""
        return self.device_len < self.prompt_len

    def complete_one(self) -> None:
        self.cached_len = self.device_len
        self.device_len += 1

    def check(self) -> None:
        assert 0 <= self.cached_len < self.device_len <= self.max_device_len, self


Phase = Literal["prefill", "decode"]


@dataclass
class Batch:
    """One forward step: which requests, in which phase, and the tensors the kernels will read."""
    reqs: list[Req]
    phase: Phase
    padded_size: int = 0  # len(reqs) rounded up to a captured CUDA-graph size (decode only)
    # the ledger turned into kernel arguments: out_loc by the scheduler (PagePool.assign_locations,
    # chapter 4), the rest by Engine.prepare (chapter 7)
    input_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    out_loc: torch.Tensor | None = None  # where each new token's K/V is written in the pool
    attn_metadata: Any = None
    sample_rows: list[int] = field(default_factory=list)  # batch rows that produce a token

    @property
    def size(self) -> int:
        return len(self.reqs)

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"
