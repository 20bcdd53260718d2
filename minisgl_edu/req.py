"""Chapter 2 — Req and Batch: how far has each request got?

A request is a ledger of three lengths, 0 <= cached_len < device_len <= max_device_len:

    position:  0 ........ cached_len ........ device_len ........ max_device_len
               | KV computed | this step extends |  still to generate   |
               |<----------->|<-- extend_len --->|                      |
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
        """Raise ValueError, its first word the field's name, for values no engine could honour."""
        num = lambda v: isinstance(v, (int, float))  # NaN then fails every comparison below
        for name, ok, what in [
                ("temperature", lambda t: num(t) and 0 <= t < math.inf, "a finite number >= 0"),
                ("top_p", lambda p: num(p) and 0 < p <= 1, "in (0, 1]"),
                ("top_k", lambda k: _is_int(k) and (k >= 1 or k == -1), "-1 (off) or an integer >= 1"),
                ("max_tokens", lambda n: _is_int(n) and n > 0, "an integer > 0"),
                ("presence_penalty", lambda v: num(v) and -2 <= v <= 2, "in [-2, 2]"),
                ("frequency_penalty", lambda v: num(v) and -2 <= v <= 2, "in [-2, 2]"),
                ("min_p", lambda v: num(v) and 0 <= v <= 1, "in [0, 1]"),
                ("repetition_penalty", lambda v: num(v) and 1e-6 <= v <= 1e6, "in [1e-06, 1000000.0]"),
                ("min_tokens", lambda n: _is_int(n) and 0 <= n <= self.max_tokens, "in [0, max_tokens]"),
                ("logprobs", lambda n: n is None or (_is_int(n) and 0 <= n <= 20), "None or in [0, 20]")]:
            if not ok(v := getattr(self, name)):
                raise ValueError(f"{name} must be {what}, got {v!r}")
        vocab = vocab_size or 2**31
        if any(not _is_int(t) or not 0 <= t < vocab for t, _ in self.logit_bias):
            raise ValueError(f"logit_bias keys must be token ids in [0, {vocab})")
        if any(not num(b) or not -100 <= b <= 100 for _, b in self.logit_bias):
            raise ValueError("logit_bias values must be in [-100, 100]")
        if any(not _is_int(t) or not 0 <= t < vocab for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be token ids in [0, {vocab})")

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
    plain: bool | None = field(default=None, init=False, repr=False)  # sampling.plain_greedy's verdict, once

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
    def is_decoding(self) -> bool:
        """Its prompt is all in the KV cache: a step extends only its last sampled token (a decode row)."""
        return self.cached_len >= self.prompt_len

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
    padded_size: int = 0  # len(reqs) rounded up to a captured CUDA-graph size
    padded_tokens: int = 0  # a prefill step's prompt rows rounded up to its graph's capacity (graphs.py); 0: none
    decode_rows: int = 0  # a mixed step: its first decode_rows requests extend one sampled token each
    # the ledger turned into kernel arguments: out_loc by the scheduler (PagePool.assign_locations,
    # chapter 4), the rest by Engine.prepare (chapter 7)
    input_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    out_loc: torch.Tensor | None = None  # where each new token's K/V is written in the pool
    attn_metadata: Any = None
    balanced: bool = False  # a decode step whose attention runs FlashInfer's balanced kernel (chapter 7: uneven contexts)
    sample_rows: list[int] = field(default_factory=list)  # batch rows that produce a token
    logprobs: Any = None  # sampling.Logprobs of the sampled rows, when a request asked for them (chapter 9)

    @property
    def size(self) -> int:
        return len(self.reqs)

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"

    @property
    def in_graph(self) -> bool:
        """It replayed a CUDA graph: Engine._forward pads exactly those steps (a prompt-only graph: padded_tokens)."""
        return self.padded_size > 0 or self.padded_tokens > 0
