"""Chapter 9 — constrained decoding: how can a model be made to answer only JSON that fits a schema?

A grammar compiled from the schema by xgrammar (as SGLang does) masks, before each draw, every
token that cannot come next; once the schema is complete only EOS is left. The matcher lives on the
host: with overlap on (chapter 6) a constrained row reads its newest tokens from the device's token
pool, one sync per step paid only by batches that hold a constrained request.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import torch

from .req import Req

MAX_GRAMMARS = 64  # compiled grammars kept per process (schema text -> compiled)


@dataclass
class GrammarState:
    """One request's matcher and how many of its output tokens it has accepted."""
    matcher: Any  # xgrammar.GrammarMatcher
    accepted: int = 0


class GrammarBackend:
    """xgrammar's tokenizer info and compiler for one model (its vocabulary and stop tokens)."""

    def __init__(self, model_path: str, vocab_size: int, stop_token_ids: tuple[int, ...]):
        try:
            import xgrammar as xgr
        except ImportError:  # a refusal (400), not a dead scheduler
            raise ValueError("json_schema needs the xgrammar package (pip install xgrammar)") from None
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model_path)
        self.info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size,
                                                       stop_token_ids=list(stop_token_ids) or None)
        self.compiler = xgr.GrammarCompiler(self.info)
        self.vocab_size = vocab_size
        # compact JSON (any_whitespace=False): free whitespace would let a small model loop on spaces until max_tokens
        self.compile = functools.lru_cache(MAX_GRAMMARS)(
            lambda schema: self.compiler.compile_json_schema(schema, any_whitespace=False))

    def new_state(self, schema: str) -> GrammarState:
        """A fresh matcher for `schema`; ValueError if xgrammar cannot compile it."""
        import xgrammar as xgr
        try:
            return GrammarState(xgr.GrammarMatcher(self.compile(schema)))
        except RuntimeError as e:  # xgrammar reports unsupported or malformed schemas as RuntimeError
            why = re.sub(r"^\[[\d:]+\] \S+: ", "", str(e).splitlines()[-1])  # drop xgrammar's time and source line
            raise ValueError(f"json_schema cannot be compiled: {why[:300]}") from None


@functools.lru_cache(maxsize=4)
def backend_for(model_path: str, vocab_size: int, stop_token_ids: tuple[int, ...]) -> GrammarBackend:
    """One backend per model and process (building the tokenizer info takes a second)."""
    return GrammarBackend(model_path, vocab_size, stop_token_ids)


def catch_up(req: Req, token_pool: torch.Tensor) -> None:
    """Feed the matcher the output tokens it has not seen: from the host list, else from the token pool."""
    g = req.grammar
    have = req.device_len - req.prompt_len  # output tokens on the device (the newest may still be in flight)
    if g.accepted >= have:
        return
    known = req.token_ids[req.prompt_len + g.accepted:req.prompt_len + have]
    if len(known) < have - g.accepted:  # overlap: the host has not processed the last step yet
        known = token_pool[req.table_idx, req.prompt_len + g.accepted:req.device_len].tolist()  # the sync
    for t in known:
        g.matcher.accept_token(int(t))
    g.accepted = have


def allowed_mask(reqs: list[Req], vocab: int, token_pool: torch.Tensor) -> torch.Tensor | None:
    """[B, V] bool: True where the request's grammar lets the token come next (all True without a grammar)."""
    rows = [i for i, r in enumerate(reqs) if r.grammar is not None]
    if not rows:
        return None
    import xgrammar as xgr
    bits = xgr.allocate_token_bitmask(len(reqs), vocab)
    bits.fill_(-1)  # every bit set: unconstrained rows allow everything
    for i in rows:
        catch_up(reqs[i], token_pool)
        if not reqs[i].grammar.matcher.is_terminated():
            reqs[i].grammar.matcher.fill_next_token_bitmask(bits, i)
    allowed = unpack(bits, vocab)
    allowed[~allowed.any(-1)] = True  # a matcher with no way forward: let the row end by itself (no NaNs)
    return allowed


def unpack(bits: torch.Tensor, vocab: int) -> torch.Tensor:
    """xgrammar's int32 bitmask [B, ceil(V/32)] -> bool [B, V] (bit j of word w is token 32 w + j)."""
    shifts = torch.arange(32, dtype=torch.int32)
    return ((bits[:, :, None] >> shifts) & 1).reshape(bits.shape[0], -1)[:, :vocab].bool()
