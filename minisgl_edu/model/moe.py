"""Chapter 10 — Mixture of experts: which weights does each token read, and how does a batch of
tokens become per-expert work?

`route` keeps each token's top_k experts; `experts_reference` (the naive twin, a loop over experts)
and `experts_grouped` (pairs sorted by expert, one grouped GEMM per projection) sit behind one
switch, `EngineConfig.moe_impl`. TP shards every expert's intermediate dimension (chapter 10's page).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..tp import all_reduce, shard_range
from .layers import KERNELS, _param, silu_and_mul
from .llama import MLP, LlamaForCausalLM


@dataclass
class Routing:
    """What the router decided: for token t, experts[t, j] with weight weights[t, j], j < top_k."""
    weights: torch.Tensor  # [tokens, top_k], in the model's dtype
    experts: torch.Tensor  # [tokens, top_k] int64


def route(router_logits: torch.Tensor, top_k: int, norm_topk_prob: bool) -> Routing:
    """softmax over all experts (in float32), keep the top_k, optionally renormalise them to sum 1."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return Routing(weights.to(router_logits.dtype), experts)


@dataclass
class ExpertGroups:
    """The batch's (token, choice) pairs, sorted so that each expert's rows are contiguous."""
    order: torch.Tensor  # [tokens * top_k]: flat pair index (t * top_k + j) of each grouped row
    token: torch.Tensor  # [tokens * top_k]: the token each grouped row reads (order // top_k)
    counts: torch.Tensor  # [num_experts]: rows per expert (the expert's group size)
    ends: torch.Tensor  # [num_experts] int32: cumulative counts, the end row of each expert's group


def group_by_expert(experts: torch.Tensor, num_experts: int) -> ExpertGroups:
    """Sort the flat (token, choice) pairs by expert id. Fixed shapes and no host sync, so it can be
    captured in a CUDA graph: the group sizes live on the device, only the grouped GEMM reads them."""
    flat = experts.reshape(-1)
    sorted_ids, order = torch.sort(flat, stable=True)  # stable: inside a group, tokens keep batch order
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, sorted_ids, torch.ones_like(sorted_ids))
    return ExpertGroups(order, order // experts.shape[-1], counts, torch.cumsum(counts, 0).to(torch.int32))


def experts_reference(x: torch.Tensor, routing: Routing, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """The naive twin: for each expert, gather the tokens that chose it, run its MLP, add the weighted
    result back into those tokens' rows. gate_up: [E, 2I, H], down: [E, H, I]."""
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        tok, slot = torch.nonzero(routing.experts == e, as_tuple=True)
        if len(tok) == 0:
            continue  # nobody chose this expert: its weights are not read at all
        h = silu_and_mul(F.linear(x[tok], gate_up[e]))
        y = F.linear(h, down[e]) * routing.weights[tok, slot, None]
        out.index_add_(0, tok, y)
    return out


def experts_grouped(x: torch.Tensor, routing: Routing, gate_up: torch.Tensor, down: torch.Tensor,
                    group=None) -> torch.Tensor:
    """The fast path: tokens grouped by expert (by `group`, default `group_by_expert`, looked up at
    call time so notebook 10 can plug its own in), two grouped GEMMs for the whole layer."""
    tokens, k = routing.experts.shape
    g = (group or group_by_expert)(routing.experts, gate_up.shape[0])
    h = silu_and_mul(grouped_mm(x[g.token], gate_up, g.ends))  # [tokens * k, I]
    y = grouped_mm(h, down, g.ends) * routing.weights.reshape(-1)[g.order, None]
    per_pair = torch.empty_like(y)
    per_pair[g.order] = y  # back to (token, choice) order: no atomics, so the sum is deterministic
    return per_pair.view(tokens, k, -1).sum(dim=1)


def grouped_mm(rows: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """rows[ends[e-1]:ends[e]] @ weight[e]^T for every expert e, in one kernel when torch has one."""
    gmm = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    rows, w = rows.contiguous(), weight.transpose(1, 2)
    if gmm is not None and rows.shape[0] > 0 and _aligned(rows) and _aligned(w):
        return gmm(rows, w, offs=ends)
    out, start = rows.new_empty(rows.shape[0], weight.shape[1]), 0  # fallback: one matmul per expert (syncs)
    for e, end in enumerate(ends.tolist()):
        out[start:end] = rows[start:end] @ weight[e].T
        start = end
    return out


def _aligned(t: torch.Tensor) -> bool:
    """The grouped kernel reads 16-byte aligned rows: every stride but the unit one a multiple of 16 bytes."""
    return t.data_ptr() % 16 == 0 and all(s * t.element_size() % 16 == 0 for s in t.stride() if s != 1)


def moe_impl(x: torch.Tensor) -> str:
    """The switch, `EngineConfig.moe_impl`: reference or grouped; None: reference on the CPU, grouped on CUDA."""
    return KERNELS.moe or ("grouped" if x.is_cuda else "reference")


class Experts(nn.Module):
    """Every expert's weights as two 3-D tensors (transformers 5's layout, our TP shard of it):
    gate_up_proj [E, 2 * I_rank, H] (gate rows, then up rows) and down_proj [E, H, I_rank]."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int):
        super().__init__()
        self.start, end = shard_range(intermediate)
        self.inter, n = intermediate, end - self.start
        self.gate_up_proj = _param(num_experts, 2 * n, hidden, load=self._load_gate_up,
                                   full_shape=(num_experts, 2 * intermediate, hidden))
        self.down_proj = _param(num_experts, hidden, n, load=self._load_down,
                                full_shape=(num_experts, hidden, intermediate))
        for p in (self.gate_up_proj, self.down_proj):
            p.draw_on_device = True  # dummy weights: tens of GB, drawn where they live (model.build_model)

    def _load_gate_up(self, param, sl, part=None) -> None:
        """part None: a fused [E, 2I, H] tensor; part (e, 0 | 1): expert e's gate or up matrix [I, H]."""
        n, s = param.shape[1] // 2, self.start
        if part is None:
            param[:, :n].copy_(sl[:, s:s + n])
            param[:, n:].copy_(sl[:, self.inter + s:self.inter + s + n])
        else:
            e, which = part
            param[e, which * n:(which + 1) * n].copy_(sl[s:s + n])

    def _load_down(self, param, sl, part=None) -> None:
        """part None: a fused [E, H, I] tensor; part (e, None): expert e's down matrix [H, I]."""
        n, s = param.shape[2], self.start
        if part is None:
            param.copy_(sl[:, :, s:s + n])
        else:
            param[part[0]].copy_(sl[:, s:s + n])


class Router(nn.Module):
    """One score per expert per token (a linear layer), replicated on every rank."""

    def __init__(self, hidden: int, num_experts: int):
        super().__init__()
        self.weight = _param(num_experts, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class SparseMoeBlock(nn.Module):
    """Router + experts: the MLP of a sparse layer. `trace`, when a list, collects each step's Routing."""

    def __init__(self, cfg, layer_id: int):
        super().__init__()
        self.layer_id, self.top_k, self.norm_topk_prob = layer_id, cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.gate = Router(cfg.hidden_size, cfg.num_experts)
        self.experts = Experts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        self.trace: list[Routing] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        routing = route(self.gate(x), self.top_k, self.norm_topk_prob)
        if self.trace is not None:
            self.trace.append(routing)
        run = experts_grouped if moe_impl(x) == "grouped" else experts_reference
        return all_reduce(run(x, routing, self.experts.gate_up_proj, self.experts.down_proj))


def is_sparse_layer(cfg, layer_id: int) -> bool:
    """transformers' rule: a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step-th."""
    return (layer_id not in (cfg.mlp_only_layers or []) and cfg.num_experts > 0
            and (layer_id + 1) % cfg.decoder_sparse_step == 0)


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3's decoder (q/k RMSNorm) with a SparseMoeBlock as the MLP of every sparse layer."""

    def make_mlp(self, cfg, layer_id: int) -> nn.Module:
        return SparseMoeBlock(cfg, layer_id) if is_sparse_layer(cfg, layer_id) else MLP(cfg)


_EXPERT_TENSOR = re.compile(r"^(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def expert_target(name: str) -> tuple[str, tuple] | None:
    """A per-expert checkpoint name (`...experts.3.up_proj.weight`, how transformers saves them) ->
    (our fused parameter, (expert, part)); None for any other tensor."""
    m = _EXPERT_TENSOR.match(name)
    if m is None:
        return None
    base, e, kind = m[1], int(m[2]), m[3]
    if kind == "down":
        return f"{base}.down_proj", (e, None)
    return f"{base}.gate_up_proj", (e, 0 if kind == "gate" else 1)


def incomplete_experts(seen: set[tuple[str, object]], params: dict) -> list[str]:
    """Expert tensors a checkpoint filled only in part (some expert's gate, up or down matrix absent)."""
    parts: dict[str, set] = {}
    for target, part in seen:
        parts.setdefault(target, set()).add(part)
    out = []
    for name, p in params.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")) and None not in parts.get(name, {None}):
            want = p.shape[0] * (2 if name.endswith("gate_up_proj") else 1)
            if len(parts[name]) < want:
                out.append(f"{name} ({len(parts[name])} of {want} expert matrices)")
    return out


# ---- the memory floor of a MoE decode step ---------------------------------------------------------
def expected_experts_read(batch_size: int, num_experts: int, top_k: int) -> float:
    """Expected number of distinct experts one layer reads for `batch_size` tokens, each choosing
    top_k of num_experts uniformly at random: an expert is missed by one token with probability
    1 - k/E, by all B tokens with (1 - k/E)^B."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** batch_size)


@dataclass
class MoeBytes:
    """Weight bytes of a MoE model split by who reads them in a decode step."""
    dense: int  # read every step: attention, norms, routers, embeddings/head, dense MLP layers
    per_expert: int  # one expert of one layer (gate + up + down)
    sparse_layers: int
    num_experts: int
    top_k: int

    @property
    def total(self) -> int:
        return self.dense + self.sparse_layers * self.num_experts * self.per_expert

    def step_bytes(self, batch_size: int, experts_read=None) -> float:
        """Weight bytes read by a decode step of `batch_size` tokens: `experts_read(B)` distinct experts
        per sparse layer (measured), or by default the expectation under uniform routing."""
        e = (experts_read or (lambda b: expected_experts_read(b, self.num_experts, self.top_k)))(batch_size)
        return self.dense + self.sparse_layers * e * self.per_expert


def moe_bytes_from_config(cfg, bytes_per_param: int = 2, tp: int = 1) -> MoeBytes:
    """The same split from a config alone (no model built): one rank's bytes at tensor parallel size tp."""
    h, d, e = cfg.hidden_size, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads, cfg.num_experts
    kv_rows = max(1, cfg.num_key_value_heads // tp) * d * 2  # K and V rows this rank keeps
    attn = h * (cfg.num_attention_heads // tp * d) * 2 + h * kv_rows + 2 * d + 2 * h  # q, o; k, v; q/k norms; 2 norms
    sparse = sum(is_sparse_layer(cfg, i) for i in range(cfg.num_hidden_layers))
    dense_mlp = (cfg.num_hidden_layers - sparse) * 3 * h * cfg.intermediate_size // tp
    vocab = -(-cfg.vocab_size // tp) * h * (1 if cfg.tie_word_embeddings else 2)
    dense = cfg.num_hidden_layers * attn + sparse * e * h + dense_mlp + vocab + h  # + routers, final norm
    return MoeBytes(dense * bytes_per_param, 3 * h * cfg.moe_intermediate_size // tp * bytes_per_param, sparse,
                    e, cfg.num_experts_per_tok)


def ep_rank_loads(experts: torch.Tensor, num_experts: int, ep: int) -> torch.Tensor:
    """Expert parallelism: rank r holds experts [r E/ep, (r+1) E/ep). Rows (token, choice) each rank
    must compute for one step's routing: its load, set by which experts the tokens chose."""
    return torch.bincount(experts.reshape(-1) // (num_experts // ep), minlength=ep)


def moe_bytes(model: nn.Module) -> MoeBytes:
    """Split `model`'s parameter bytes (this rank's shard) into dense and per-expert bytes."""
    blocks = [m for m in model.modules() if isinstance(m, SparseMoeBlock)]
    nbytes = lambda p: p.numel() * p.element_size()
    expert_total = sum(nbytes(b.experts.gate_up_proj) + nbytes(b.experts.down_proj) for b in blocks)
    dense = sum(nbytes(p) for p in model.parameters()) - expert_total
    e = blocks[0].experts.gate_up_proj.shape[0] if blocks else 1
    per = expert_total // (len(blocks) * e) if blocks else 0
    return MoeBytes(dense, per, len(blocks), e, blocks[0].top_k if blocks else 0)


def moe_decode_floor_s(prompt_lens: list[int], output_lens: list[int], wb: MoeBytes, kv_tok: int, bw: float,
                       experts_read=None) -> float:
    """bench.decode_floor_s for a MoE model: the step that produces output token j reads the dense
    weights, the experts its B running tokens choose (`MoeBytes.step_bytes`) and their K/V."""
    total = 0.0
    for j in range(2, max(output_lens) + 1):
        running = [(p, o) for p, o in zip(prompt_lens, output_lens) if o >= j]
        total += wb.step_bytes(len(running), experts_read) + sum(p + j - 1 for p, _ in running) * kv_tok
    return total / bw
