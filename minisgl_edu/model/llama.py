"""A Llama-family decoder (Llama, Qwen2 with qkv bias, Qwen3 with q/k RMSNorm) over the paged KV pool.

The model never sees requests: it reads a flat batch of tokens (`input_ids`, `positions`) and asks
the attention backend to store and attend; the backend knows which tokens belong to whom.
"""
from __future__ import annotations

import torch
from torch import nn

from ..tp import DistributedInfo, get_tp_info
from .layers import (ColumnParallelLinear, ParallelLMHead, RMSNorm, RotaryEmbedding, RowParallelLinear,
                     VocabParallelEmbedding, norm_linear, qk_kernel, silu_mul_down)


def head_layout(num_heads: int, num_kv_heads: int, tp: DistributedInfo | None = None) -> tuple[int, int, int, int]:
    """(q heads per rank, first q head, kv heads per rank, first kv head) for this TP rank.
    KV heads are split when tp divides them and replicated when tp exceeds them."""
    tp = tp or get_tp_info()
    if num_heads % tp.size:
        raise ValueError(f"tp={tp.size} does not divide the model's {num_heads} query heads "
                         f"({num_heads} % {tp.size} = {num_heads % tp.size}); pick a tp size that divides {num_heads}")
    if tp.size <= num_kv_heads:
        if num_kv_heads % tp.size:
            raise ValueError(f"tp={tp.size} does not divide the model's {num_kv_heads} KV heads")
        kv = num_kv_heads // tp.size
        kv_start = tp.rank * kv
    else:  # more ranks than KV heads: each rank keeps one KV head, shared by tp / num_kv_heads ranks
        if tp.size % num_kv_heads:
            raise ValueError(f"tp={tp.size} is not a multiple of the model's {num_kv_heads} KV heads")
        kv, kv_start = 1, tp.rank // (tp.size // num_kv_heads)
    q = num_heads // tp.size
    return q, tp.rank * q, kv, kv_start


def check_tp(cfg, size: int) -> None:
    """Raise ValueError, naming the numbers, if a model cannot be split over `size` ranks."""
    head_layout(cfg.num_attention_heads, cfg.num_key_value_heads, DistributedInfo(0, size))
    if getattr(cfg, "moe_intermediate_size", None) and cfg.moe_intermediate_size % size:  # chapter 10
        raise ValueError(f"tp={size} does not divide the model's moe_intermediate_size {cfg.moe_intermediate_size}")
    if cfg.intermediate_size % size:
        raise ValueError(f"tp={size} does not divide the model's intermediate size {cfg.intermediate_size}")


class Attention(nn.Module):
    def __init__(self, cfg, layer_id: int, rope: RotaryEmbedding):
        super().__init__()
        self.layer_id, self.rope = layer_id, rope
        d = self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.q_heads, q0, self.kv_heads, kv0 = head_layout(cfg.num_attention_heads, cfg.num_key_value_heads)
        bias = getattr(cfg, "attention_bias", False) or cfg.model_type == "qwen2"
        self.qkv_proj = ColumnParallelLinear(cfg.hidden_size, [
            (cfg.num_attention_heads * d, self.q_heads * d, q0 * d),
            (cfg.num_key_value_heads * d, self.kv_heads * d, kv0 * d),
            (cfg.num_key_value_heads * d, self.kv_heads * d, kv0 * d)], bias=bias)
        self.o_proj = RowParallelLinear(cfg.num_attention_heads * d, cfg.hidden_size)
        self.qk_norm = cfg.model_type in ("qwen3", "qwen3_moe")
        if self.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(d, cfg.rms_norm_eps), RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, qkv: torch.Tensor, positions: torch.Tensor, backend, batch) -> torch.Tensor:
        """Attention over the q|k|v projection's output (the decoder layer computes it with the norm before it)."""
        qd, kvd = self.q_heads * self.head_dim, self.kv_heads * self.head_dim
        if (qk := qk_kernel(qkv, backend)) is not None:  # one launch: q/k norm, RoPE, K/V into the pool
            norm = (self.q_norm.weight, self.k_norm.weight, self.q_norm.eps) if self.qk_norm else (None, None, 0.0)
            qk.qk_norm_rope_store(qkv, self.q_heads, self.kv_heads, self.head_dim, positions, self.rope.cos_sin, *norm,
                                  backend.kv.k[self.layer_id], backend.kv.v[self.layer_id], backend.store_locations(batch))
            o = backend.attend(qkv[:, :qd].unflatten(-1, (self.q_heads, self.head_dim)), self.layer_id, batch)
            return self.o_proj(o.reshape(-1, qd))
        q, k, v = qkv.split([qd, kvd, kvd], dim=-1)
        q = q.unflatten(-1, (self.q_heads, self.head_dim))  # views into the q|k|v buffer, no copies
        k = k.unflatten(-1, (self.kv_heads, self.head_dim))
        v = v.unflatten(-1, (self.kv_heads, self.head_dim))
        if self.qk_norm:  # fused: in place, so K stays next to V for a one-copy store
            q, k = self.q_norm(q, inplace=True), self.k_norm(k, inplace=True)
        q, k = self.rope(positions, q, k)
        o = backend.forward(q, k, v, self.layer_id, batch)
        return self.o_proj(o.reshape(-1, qd))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_up_proj = ColumnParallelLinear.simple(cfg.hidden_size, cfg.intermediate_size, merged=2)
        self.down_proj = RowParallelLinear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gate_up_proj(x))

    def down(self, gu: torch.Tensor) -> torch.Tensor:
        """The MLP after its gate|up product: down(silu(gate) * up)."""
        return silu_mul_down(gu, self.down_proj)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_id: int, rope: RotaryEmbedding, mlp: nn.Module | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_id, rope)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = mlp if mlp is not None else MLP(cfg)

    def forward(self, h, positions, backend, batch, residual=None):
        """(output, residual): the residual stream h + attn + mlp is carried apart from the layer's
        output, so each add joins the next norm (fused: one kernel) instead of a kernel of its own."""
        if residual is None:  # the first layer: the embeddings are the residual stream
            residual, h = h, self.input_layernorm(h)
            qkv = self.self_attn.qkv_proj(h)
        else:  # the add, the norm and the product after it: one launch for one row (norm_linear)
            qkv, residual = norm_linear(h, residual, self.input_layernorm, self.self_attn.qkv_proj)
        h = self.self_attn(qkv, positions, backend, batch)
        if isinstance(self.mlp, MLP):
            gu, residual = norm_linear(h, residual, self.post_attention_layernorm, self.mlp.gate_up_proj)
            return self.mlp.down(gu), residual
        h, residual = self.post_attention_layernorm(h, residual)  # a mixture of experts (chapter 10)
        return self.mlp(h), residual


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, max_positions: int):
        super().__init__()
        self.config = cfg
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        rope = RotaryEmbedding(cfg, head_dim, max_positions)
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, rope, self.make_mlp(cfg, i))
                                    for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def make_mlp(self, cfg, layer_id: int) -> nn.Module:
        """Layer `layer_id`'s MLP (a mixture-of-experts model overrides this: model/moe.py)."""
        return MLP(cfg)

    def forward(self, input_ids, positions, backend, batch) -> torch.Tensor:
        """Hidden states of every token in the batch, shape [tokens, hidden]."""
        h, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            h, residual = layer(h, positions, backend, batch, residual)
        return self.norm(h, residual)[0]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The LM head's output in the model's dtype (bf16 on CUDA): the engine makes the float32 copy only when
        sampling needs it (a greedy argmax is the same index in either)."""
        return self.lm_head(h)
