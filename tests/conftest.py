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


@pytest.fixture(scope="session")
def default_server():
    """One `python -m minisgl_edu.serve` of the default model (1024-token context, a 16k-token pool) for
    every module that only needs a healthy server: a start costs ~20 s of CI. Stopped at session end
    with the checks each module made of its own: SIGTERM is a clean shutdown and no worker survives."""
    from test_server import Server, no_survivors
    s = Server("--context-length", "1024", "--max-total-tokens", "16384")
    yield s
    s.stop()
    assert s.proc.returncode == 0
    assert no_survivors(s.children)
