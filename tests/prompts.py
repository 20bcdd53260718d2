"""Prompts of mixed lengths for the oracle tests (a plain module: conftest files are not importable
by name once several exist)."""
from __future__ import annotations

LOREM = ("The history of computing is a story of layers: each generation of engineers builds on the "
         "abstractions of the last, hiding detail so that the next can think in larger pieces. ")


def make_prompts(tok) -> list[list[int]]:
    """8 prompts from 5 to > 300 tokens (many pages of 16, ten chunks of 32); three share a long prefix.
    (The longest was > 600 tokens: prefill is most of the oracle's CPU time, and 300 covers the same paths.)"""
    texts = ["Hello there, how are", "Write a haiku about the sea:", "The three primary colours are",
             LOREM * 3 + "In one sentence, the main idea is", LOREM * 6 + "To summarise:",
             LOREM * 9 + "Therefore,", "1, 2, 3, 4, 5,", "def fibonacci(n):\n   "]
    ids = [tok.encode(t) for t in texts]
    assert min(map(len, ids)) >= 5 and max(map(len, ids)) >= 300, [len(i) for i in ids]
    return ids
