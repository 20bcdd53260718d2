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
    # chapter 9's sampling controls (OpenAI's, vLLM's and SGLang's names); the defaults change nothing
    presence_penalty: float = 0.0  # minus this for every token already in the output
    frequency_penalty: float = 0.0  # minus this times the token's count in the output
    repetition_penalty: float = 1.0  # transformers' rule over prompt + output: logit / p if > 0, else * p
    min_p: float = 0.0  # drop tokens whose probability is below min_p * the top probability
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias) pairs added to the logits; +-100 forces/bans
    stop_token_ids: tuple[int, ...] = ()  # finish with "stop" on any of these (besides EOS)
    min_tokens: int = 0  # EOS and stop_token_ids are masked until this many tokens are out
    logprobs: int | None = None  # None: off; k: the chosen token's logprob and the k most likely (0..20)
    json_schema: str | None = None  # a JSON schema the output must match (a grammar mask each step)

    def validate(self, vocab_size: int | None = None) -> None:
        """Raise ValueError with a clear message for values no engine could honour."""
        t = self.temperature
        if not isinstance(t, (int, float)) or math.isnan(t) or math.isinf(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or (self.top_k < 1 and self.top_k != -1):
            raise ValueError(f"top_k must be -1 (off) or an integer >= 1, got {self.top_k!r}")
        if not _is_int(self.max_tokens) or self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be an integer > 0, got {self.max_tokens!r}")
        self._validate_controls(vocab_size or 2**31)

    def _validate_controls(self, vocab: int) -> None:
        for name, lo, hi in [("presence_penalty", -2, 2), ("frequency_penalty", -2, 2), ("min_p", 0, 1),
                             ("repetition_penalty", 1e-6, 1e6)]:
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not lo <= v <= hi:  # NaN fails both comparisons
                raise ValueError(f"{name} must be in [{lo}, {hi}], got {v!r}")
        if any(not _is_int(t) or not 0 <= t < vocab for t, _ in self.logit_bias):
            raise ValueError(f"logit_bias keys must be token ids in [0, {vocab})")
        if any(not isinstance(b, (int, float)) or not -100 <= b <= 100 for _, b in self.logit_bias):
            raise ValueError("logit_bias values must be in [-100, 100]")
        if any(not _is_int(t) or not 0 <= t < vocab for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be token ids in [0, {vocab})")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens], got {self.min_tokens!r}")
        if self.logprobs is not None and (not _is_int(self.logprobs) or not 0 <= self.logprobs <= 20):
            raise ValueError(f"logprobs must be None or in [0, 20], got {self.logprobs!r}")

    @property
    def needs_penalties(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


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
    grammar: Any = None  # grammar.GrammarState when sampling.json_schema is set (chapter 9)

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
    logprobs: Any = None  # sampling.Logprobs of the sampled rows, when a request asked for them (chapter 9)

    @property
    def size(self) -> int:
        return len(self.reqs)

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"
