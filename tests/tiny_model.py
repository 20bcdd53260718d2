"""A tiny random-weight Llama for tests that need a real engine but not a real model."""
from __future__ import annotations

import os

import pytest
import torch

VOCAB = 97


@pytest.fixture
def one_thread():
    """Run a tiny model on one thread: its matrices are too small to share, and on a busy machine
    idle OpenMP workers spinning for a core make each step ~40x slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_model_dir(root: str, vocab: int = VOCAB, max_positions: int = 256, tokenizer_from: str | None = None) -> str:
    """Write a config-only Llama folder (2 layers, hidden 32, GQA 4:2) under `root`; return its path.
    With `tokenizer_from`, copy that model's tokenizer and chat template in (vocab must match it)."""
    import shutil

    from transformers import LlamaConfig
    path = os.path.join(root, f"tiny-llama-{vocab}-{max_positions}")
    if tokenizer_from and not os.path.exists(os.path.join(path, "tokenizer.json")):
        os.makedirs(path, exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
            if os.path.exists(os.path.join(tokenizer_from, name)):
                shutil.copy(os.path.join(tokenizer_from, name), path)
    if not os.path.exists(os.path.join(path, "config.json")):
        LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                    tie_word_embeddings=False).save_pretrained(path)
    return path


def tiny_llm(path: str, **kw):
    from minisgl_edu import LLM
    kw.setdefault("device", "cpu")
    return LLM(path, dummy_weights=True, **kw)
