"""Model definition and loading (supporting code, used by every chapter)."""
from __future__ import annotations

import glob
import os
import re

import torch

from . import qk_kernel
from .layers import KERNELS, column_major
from .llama import LlamaForCausalLM, check_tp  # noqa: F401  (check_tp: chapter 8, used by the offline API)
from .moe import Qwen3MoeForCausalLM, expert_target, incomplete_experts

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral", "qwen3_moe")
ARCHITECTURES = {"qwen3_moe": Qwen3MoeForCausalLM}  # model_type -> class; the rest are LlamaForCausalLM

# checkpoint name piece -> (our module name, part of a merged matrix)
_MERGED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


def load_config(path: str):
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(path)
    if cfg.model_type not in SUPPORTED:
        raise ValueError(f"model_type {cfg.model_type!r} is not supported (supported: {', '.join(SUPPORTED)})")
    return cfg


def check_sliding_window(cfg, max_positions: int) -> None:
    """Refuse a sliding window the context can reach: the attention backends attend to every cached
    key. A query at position q sees keys k with q - k < sliding_window, so with max_positions <=
    sliding_window the window never cuts anything and the model is served exactly."""
    window = getattr(cfg, "sliding_window", None)
    if window is not None and max_positions > window:
        raise ValueError(f"{cfg.model_type} config sets sliding_window={window}, smaller than the context length "
                         f"{max_positions}, and this engine has no windowed attention; serve it with "
                         f"max_seq_len <= {window} (serve: --context-length {window}; the window is then never reached)")


def build_model(cfg, device: torch.device, dtype: torch.dtype, max_positions: int,
                path: str | None = None, dummy_weights: bool = False, seed: int = 0) -> LlamaForCausalLM:
    """Build the model on `device` in `dtype` and fill it: from safetensors under `path`, or random."""
    check_sliding_window(cfg, max_positions)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = ARCHITECTURES.get(cfg.model_type, LlamaForCausalLM)(cfg, max_positions)
    finally:
        torch.set_default_dtype(old)
    if dummy_weights:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        on_device = torch.Generator(device=device).manual_seed(seed)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.data.fill_(1.0)
            elif getattr(p, "draw_on_device", False):  # MoE experts (chapter 10): no 60 GB detour through the CPU
                p.load_full(p.data, torch.randn(p.full_shape, generator=on_device, device=device, dtype=dtype) * 0.02)
            else:  # drawn in full on the CPU, then sliced: every device and TP rank sees the same model
                p.load_full(p.data, torch.randn(p.full_shape, generator=gen) * 0.02)
    else:
        load_weights(model, path)
    # a layout for cuBLAS at one row; the plain twin keeps row-major, and so does our one-row GEMV (KERNELS.gemv)
    row_gemv = KERNELS.gemv and qk_kernel.GEMV_CONFIG["row"] and qk_kernel.gemv_ready(torch.device(device))
    if torch.device(device).type == "cuda" and KERNELS.fused and not row_gemv:
        for name, m in model.named_modules():
            if name.endswith("self_attn.o_proj"):
                column_major(m)
    return model.eval()


def load_weights(model: LlamaForCausalLM, path: str) -> None:
    from safetensors import safe_open
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path}")
    params = dict(model.named_parameters(remove_duplicate=False))
    seen = set()
    for f in files:
        with safe_open(f, framework="pt", device="cpu") as st:
            for name in st.keys():
                if "rotary_emb" in name:
                    continue
                target, part = re.sub(r"^model\.", "", name), None
                if (expert := expert_target(target)) is not None:  # one expert's matrix -> its slice of a 3-D tensor
                    target, part = expert
                else:
                    for ckpt, (ours, idx) in _MERGED.items():
                        if f".{ckpt}." in target:
                            target, part = target.replace(ckpt, ours), idx
                if target not in params:
                    if name == "lm_head.weight" and model.config.tie_word_embeddings:
                        continue
                    raise KeyError(f"checkpoint tensor {name} has no place in the model")
                p = params[target]
                with torch.no_grad():
                    p.load(p.data, _Cast(st.get_slice(name), p.dtype), part)
                seen.add((target, part))
    missing = {n for n, p in model.named_parameters()} - {t for t, _ in seen}
    if model.config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    missing |= set(incomplete_experts(seen, params))  # chapter 10: every expert of a layer, not just some
    if missing:
        raise KeyError(f"checkpoint lacks: {sorted(missing)[:5]}")


class _Cast:
    """A safetensors slice that casts what is read to the parameter's dtype."""

    def __init__(self, sl, dtype):
        self.sl, self.dtype = sl, dtype

    def __getitem__(self, idx):
        return self.sl[idx].to(self.dtype)
