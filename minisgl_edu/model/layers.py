"""Layers of a Llama-family decoder, written so tensor parallelism (chapter 8) can shard them.

Each parameter's `load(param, tensor_slice, part)` picks this rank's shard of a checkpoint tensor;
`full_shape` and `load_full` let random weights be drawn once in full and sliced alike on every rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..tp import all_gather_last_dim, all_reduce, get_tp_info, shard_range
from . import qk_kernel as kk


@dataclass
class Kernels:
    """Which kernels this process runs: `EngineConfig`'s kernel switches, set by each `Engine` (`use_kernels`)."""
    fused: bool = True  # FlashInfer's fused RMSNorm/RoPE/SiLU-and-mul on 16-bit CUDA tensors; False: plain ops
    qk: bool = True  # under `fused`: our one-launch q/k norm + RoPE + K/V store (False: FlashInfer's kernels)
    moe: str | None = None  # "reference" | "grouped" (model/moe.py); None: reference on CPU, grouped on CUDA
    gemv: bool = True  # under `fused`: one row (a batch-1 decode step) through our GEMV (gemv.cu); False: cuBLAS
    pdl: bool = True  # our GEMVs launched with programmatic dependent launch (weights loaded early); False: plain launches
    skinny: bool = True  # under `fused` and `pdl`: 2-16 rows through our tensor-core GEMM (skinny_gemm.cu); False: cuBLAS


KERNELS = Kernels()
_FUSED = False  # the flashinfer module once imported; None where it is absent (CPU machines)


def use_kernels(fused: bool = True, qk: bool = True, moe: str | None = None, gemv: bool = True, pdl: bool = True,
                skinny: bool = True) -> None:
    """The one place the kernel switches are applied. One process, one setting: the engine built last decides."""
    if moe not in (None, "reference", "grouped"):
        raise ValueError(f"moe_impl must be 'reference' or 'grouped', got {moe!r}")
    KERNELS.fused, KERNELS.qk, KERNELS.moe, KERNELS.gemv, KERNELS.pdl, KERNELS.skinny = fused, qk, moe, gemv, pdl, skinny


def fused_kernels(x: torch.Tensor):
    """FlashInfer's fused RMSNorm / RoPE / SiLU-and-mul for a 16-bit CUDA tensor, or None (then plain PyTorch
    ops): same maths, fewer kernels. The one switch for every fusion (the residual add in the norm, in-place
    q/k norm and RoPE, the one-copy K/V store, our q/k kernel): they all ask here first."""
    global _FUSED
    if not KERNELS.fused or not x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16):  # 16-bit only
        return None
    if _FUSED is False:
        try:
            import flashinfer.activation
            import flashinfer.norm
            import flashinfer.rope
            _FUSED = flashinfer
        except Exception:  # no FlashInfer (CPU machines): the PyTorch ops below serve
            _FUSED = None
    return _FUSED


def qk_kernel(x: torch.Tensor, backend):
    """The one-launch q/k norm + RoPE + K/V store (qk_kernel.py) for bf16 x under the fused switch,
    with a backend that can attend over K/V already in the pool; else None (FlashInfer's or PyTorch's ops)."""
    if not KERNELS.qk or fused_kernels(x) is None or x.dtype != torch.bfloat16 or not hasattr(backend, "attend") \
            or not hasattr(backend, "store_locations"):
        return None
    return kk if kk.available(x) else None


def _param(*shape: int, load=None, full_shape: tuple[int, ...] | None = None, load_full=None) -> nn.Parameter:
    p = nn.Parameter(torch.empty(*shape), requires_grad=False)
    p.load = load or (lambda param, sl, part=None: param.copy_(sl[:]))
    p.full_shape = full_shape or tuple(shape)  # the shape at tp size 1
    p.load_full = load_full or (lambda param, full: p.load(param, full))
    return p


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = _param(dim), eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, inplace: bool = False):
        """rmsnorm(x) over the last dim of a [tokens, dim] or [tokens, heads, head_dim] tensor; with a
        residual, (rmsnorm(x + residual), x + residual): the decoder's residual add rides along.
        inplace=True lets the fused kernel write over x (a q or k view inside the q|k|v buffer)."""
        if (fi := fused_kernels(x)) is not None:
            if residual is not None:  # one kernel: residual += x, then x = rmsnorm(residual), both in place
                fi.norm.fused_add_rmsnorm(x, residual, self.weight, self.eps)
                return x, residual
            flat = x if x.dim() in (2, 3) else x.reshape(-1, x.shape[-1])  # 3D: any head stride, no copy
            return fi.norm.rmsnorm(flat, self.weight, self.eps, out=flat if inplace else None).view(x.shape)
        if residual is not None:
            residual = residual + x
            return self._plain(residual), residual
        return self._plain(x)

    def _plain(self, x: torch.Tensor) -> torch.Tensor:
        # in float32, as Hugging Face does, whatever the model dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class ColumnParallelLinear(nn.Module):
    """y = x W^T, W's output rows split across ranks. Several checkpoint matrices may be merged into
    one (q|k|v, gate|up): `parts` lists, per part, (full rows, rows this rank keeps, start row)."""

    def __init__(self, in_features: int, parts: list[tuple[int, int, int]], bias: bool = False):
        super().__init__()
        self.parts = parts
        self.offsets = [sum(p[1] for p in parts[:i]) for i in range(len(parts))]
        out, full = sum(p[1] for p in parts), sum(p[0] for p in parts)
        self.weight = _param(out, in_features, load=self._load, full_shape=(full, in_features), load_full=self._load_full)
        self.bias = _param(out, load=self._load, full_shape=(full,), load_full=self._load_full) if bias else None

    def _load(self, param: torch.Tensor, sl, part: int = 0) -> None:
        _, n, start = self.parts[part]
        param.narrow(0, self.offsets[part], n).copy_(sl[start:start + n])

    def _load_full(self, param: torch.Tensor, full: torch.Tensor) -> None:
        row = 0
        for i, (rows, _, _) in enumerate(self.parts):  # the full matrix stacks the parts: q|k|v, gate|up
            self._load(param, full[row:row + rows], i)
            row += rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (y := one_row(x, self.weight, "column")) is not None or (y := few_rows(x, self.weight)) is not None:
            return y + self.bias if self.bias is not None else y
        return F.linear(x, self.weight, self.bias)

    @classmethod
    def simple(cls, in_features: int, out_features: int, bias: bool = False, merged: int = 1):
        start, end = shard_range(out_features)
        return cls(in_features, [(out_features, end - start, start)] * merged, bias)


def column_major(linear: nn.Module) -> None:
    """The same [out, in] weight, stored column-major (strides (1, out)): F.linear hands cuBLAS a plain x @ [in, out].
    One row of o_proj on the H200: 12.4 -> 5.1 us (issue 16); at 8 and 64 rows both layouts take the same time."""
    linear.weight.data = linear.weight.data.t().contiguous().t()


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x_r W_r^T: W's input columns split; an all-reduce joins the partial sums."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.start, end = shard_range(in_features)
        self.weight = _param(out_features, end - self.start, load=self._load, full_shape=(out_features, in_features))
        self.bias = _param(out_features) if bias else None

    def _load(self, param, sl, part=None) -> None:
        param.copy_(sl[:, self.start:self.start + param.shape[1]])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = one_row(x, self.weight, "row")  # one row: our GEMV (chapter 7); else None
        y = few_rows(x, self.weight) if y is None else y  # 2-16 rows: our tensor-core GEMM; else None
        y = all_reduce(F.linear(x, self.weight) if y is None else y)  # the ranks' partial sums, added
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """Each rank holds a contiguous slice of the vocabulary (the last one padded)."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        tp = get_tp_info()
        self.per_rank = -(-vocab // tp.size)
        self.start = tp.rank * self.per_rank
        self.vocab = vocab
        self.weight = _param(self.per_rank, dim, load=self._load, full_shape=(vocab, dim))

    def _load(self, param, sl, part=None) -> None:
        n = max(0, min(self.vocab - self.start, self.per_rank))
        param.zero_()
        param[:n].copy_(sl[self.start:self.start + n])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if get_tp_info().size == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.start
        mask = (local < 0) | (local >= self.per_rank)
        out = F.embedding(local.masked_fill(mask, 0), self.weight).masked_fill(mask[:, None], 0)
        return all_reduce(out)


class ParallelLMHead(VocabParallelEmbedding):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return all_gather_last_dim(F.linear(h, self.weight))[:, : self.vocab]


class RotaryEmbedding(nn.Module):
    """cos/sin tables for every position, from transformers' own RoPE initialisers (default,
    linear, dynamic, yarn, llama3, ...), so scaling variants match the checkpoint's reference."""

    def __init__(self, config, head_dim: int, max_positions: int):
        super().__init__()
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        params = getattr(config, "rope_parameters", None) or {}
        rope_type = params.get("rope_type", "default")
        if rope_type == "default":
            theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
            inv_freq, scale = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)), 1.0
        else:
            inv_freq, scale = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
        freqs = torch.arange(max_positions, dtype=torch.float)[:, None] * inv_freq.float()[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos() * scale, persistent=False)
        self.register_buffer("sin", emb.sin() * scale, persistent=False)

        half = emb.shape[-1] // 2  # FlashInfer's layout: [cos | sin] of the half-dimension, float32
        self.register_buffer("cos_sin", torch.cat([self.cos[:, :half], self.sin[:, :half]], -1), persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        if (fi := fused_kernels(q)) is not None:  # one kernel, in place on the strided q/k views: no copies
            fi.rope.apply_rope_with_cos_sin_cache_inplace(positions, q.flatten(1), k.flatten(1), q.shape[-1],
                                                          self.cos_sin, is_neox=True)
            return q, k
        cos = self.cos[positions].to(q.dtype)[:, None, :]  # [tokens, 1, head_dim]
        sin = self.sin[positions].to(q.dtype)[:, None, :]
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for x = [gate | up]."""
    if (fi := fused_kernels(x)) is not None:
        return fi.activation.silu_and_mul(x)
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def one_row(x: torch.Tensor, w: torch.Tensor, kind: str, residual: torch.Tensor | None = None,
            norm: RMSNorm | None = None):
    """x @ w.T through our GEMV (qk_kernel.gemv) for one row under `KERNELS.gemv` where GEMV_CONFIG has
    `kind` ("column", "row", "silu": x = [gate | up]); else None (then cuBLAS). At one row cuBLAS reads the
    weights at 0.2-0.6 of the bandwidth and splits down's K into two kernels (chapter 7). With a residual and
    its norm: (the product of norm(x + residual), x + residual)."""
    if not KERNELS.gemv or x.shape[0] != 1 or (cfg := kk.GEMV_CONFIG.get(kind)) is None or fused_kernels(x) is None:
        return None
    if norm is None:
        return kk.gemv(x, w, kind == "silu", cfg, pdl=KERNELS.pdl)
    return kk.gemv(x, w, config=cfg, residual=residual, norm_weight=norm.weight, eps=norm.eps, pdl=KERNELS.pdl)


def few_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
    """x @ w.T through our tensor-core GEMM (qk_kernel.skinny) for 2-16 rows under `KERNELS.skinny`, launched with
    PDL, else None (then cuBLAS). Only with PDL: launched plainly it is slower than cuBLAS (chapter 7). A weight
    stored column-major for cuBLAS (o_proj, model/__init__.py) is not row-major, so it stays with cuBLAS."""
    if not (KERNELS.skinny and KERNELS.pdl) or not 2 <= x.shape[0] <= kk.SKINNY_ROWS or fused_kernels(x) is None:
        return None
    return kk.skinny(x, w, pdl=True)


def norm_linear(x: torch.Tensor, residual: torch.Tensor, norm: RMSNorm, linear: ColumnParallelLinear):
    """(linear(rmsnorm(x + residual)), x + residual). One row under `KERNELS.gemv`: one launch of our GEMV with
    the add and the norm folded in (gemv.cu's norm_gemv); else the norm (fused: one kernel), then the product."""
    if (y := one_row(x, linear.weight, "column", residual, norm)) is not None:
        out, residual = y
        return (out + linear.bias if linear.bias is not None else out), residual
    h, residual = norm(x, residual)
    return linear(h), residual


def silu_mul_down(gu: torch.Tensor, down: "RowParallelLinear") -> torch.Tensor:
    """down(silu_and_mul(gu)); one row under `KERNELS.gemv`: our one-launch kernel (gemv.cu)."""
    if down.bias is None and (y := one_row(gu, down.weight, "silu")) is not None:
        return all_reduce(y)  # a row-parallel product: the ranks' partial sums joined, as in down.forward
    return down(silu_and_mul(gu))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)
