"""Shared fixtures: the default model, the transformers oracle, and prompts of mixed lengths."""
from __future__ import annotations

import functools
import os

# idle OpenMP threads spin while waiting for a core; on a shared 2-core machine that costs 10x
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch
from prompts import make_prompts

torch.set_num_threads(max(1, torch.get_num_threads()))

@pytest.fixture(scope="session")
def model_path() -> str:
    from minisgl_edu.default_model import default_model_path
    return default_model_path()


@pytest.fixture(scope="session")
def tokenizer(model_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_path)


@pytest.fixture(scope="session")
def prompts(tokenizer):
    return make_prompts(tokenizer)


@pytest.fixture(scope="session")
def hf_greedy(model_path):
    """hf_greedy(ids, n) -> transformers' greedy continuation, one prompt at a time (cached)."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()

    @functools.lru_cache(maxsize=None)
    def run(ids: tuple[int, ...], n: int) -> list[int]:
        x = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                 pad_token_id=model.config.eos_token_id)
        return out[0, len(ids):].tolist()

    return lambda ids, n: run(tuple(ids), n)
