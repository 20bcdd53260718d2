"""The token-exact oracle inside the real engine: run a workload with your code swapped in, compare
its tokens (and its schedule) with the library's own on the same workload.

The library's tokens are computed here, in the same process, on the same random-weight model: that
is fast enough to grade in seconds, and the library's path is itself proven token-exact against
transformers (tests/test_oracle.py: mixed lengths, chunking, radix hits, page sizes 1 and > 1).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np

from . import NotAttempted, Wrong

VOCAB = 97


def tiny_model_path() -> str:
    """A tiny random Llama checkpoint (2 layers, hidden 32, GQA 4:2, vocab 97; milliseconds per step), written
    once as safetensors. Its weights are drawn large (std 0.25, not 0.02) so that attention matters: a
    wrong key, a missing cached prefix or a misplaced slot changes the tokens."""
    root = os.path.join(os.path.expanduser(os.environ.get("MINISGL_CACHE", "~/.cache/minisgl_edu")), "exercises")
    path = os.path.join(root, f"tiny-llama-{VOCAB}-v2")
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        os.makedirs(root, exist_ok=True)
        cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          tie_word_embeddings=False, initializer_range=0.25)
        torch.manual_seed(0)
        tmp = f"{path}.tmp{os.getpid()}"
        LlamaForCausalLM(cfg).save_pretrained(tmp, safe_serialization=True)
        os.remove(os.path.join(tmp, "generation_config.json"))  # no EOS: every request runs to max_tokens
        if not os.path.exists(path):
            os.replace(tmp, path)
    return path


def standard_rounds(seed: int = 0) -> list[list[list[int]]]:
    """Two rounds of prompts: mixed lengths and a long one (chunked at small budgets); round 2 shares
    prefixes with round 1 (radix hits: a whole resubmitted prompt, a shared base, a cut long prompt)."""
    rng = np.random.RandomState(seed)
    tok = lambda n: rng.randint(3, VOCAB, n).tolist()
    base, long = tok(24), tok(70)
    a, b, d = base + tok(6), base + tok(9), tok(5)
    first = [a, b, long, d]
    second = [list(a), base + tok(3), long[:50] + tok(4), d + tok(11), tok(2)]
    return [first, second]


@dataclass(frozen=True)
class Case:
    page_size: int = 1
    max_prefill_tokens: int = 32
    max_total_tokens: int = 1024
    max_running_reqs: int = 8
    overlap: bool = False
    cache: str = "radix"
    max_tokens: int = 5
    eos: tuple[int, ...] = ()
    seed: int = 0
    tp: int = 1
    model: str = "tiny"  # "tiny" (random weights, milliseconds per step) | "default" (SmolLM2-135M, seconds)

    def describe(self) -> str:
        bits = [f"page_size={self.page_size}", f"max_prefill_tokens={self.max_prefill_tokens}",
                f"max_total_tokens={self.max_total_tokens}", f"max_running_reqs={self.max_running_reqs}"]
        bits += ["overlap"] if self.overlap else []
        bits += [f"eos={list(self.eos)}"] if self.eos else []
        bits += [f"tp={self.tp}"] if self.tp > 1 else []
        bits += ["the default model"] if self.model == "default" else []
        return ", ".join(bits)


STANDARD_CASES = (Case(1, 32, 1024), Case(4, 16, 256, 4), Case(2, 8192, 2048))


@dataclass
class Run:
    tokens: list[list[int]]  # per request, in submission order over all rounds
    schedule: list[tuple] = field(default_factory=list)  # (phase, batch size, tokens, cache-hit tokens) per step


def _llm(case: Case):
    from ..llm import LLM
    logging.getLogger("minisgl_edu").setLevel(logging.ERROR)  # "no tokenizer": ids are all we pass
    if case.model == "default":
        from ..default_model import default_model_path
        path = default_model_path()
    else:
        path = tiny_model_path()
    return LLM(path, device="cpu", page_size=case.page_size,
               max_prefill_tokens=case.max_prefill_tokens, max_total_tokens=case.max_total_tokens,
               max_running_reqs=case.max_running_reqs, overlap=case.overlap, cache=case.cache, tp=case.tp)


def run_case(case: Case, rounds=None) -> Run:
    """Run the rounds through a fresh engine (the current library, swaps included); raise Wrong on a hang or
    a broken ledger, with the round it happened in."""
    import torch

    from ..req import SamplingParams
    rounds = rounds if rounds is not None else standard_rounds(case.seed)
    threads = torch.get_num_threads()
    if case.model == "tiny":
        torch.set_num_threads(1)  # a tiny model: one thread is fastest, and the machine may be shared
    try:
        llm = _llm(case)
        try:
            return _drive(llm, case, rounds, SamplingParams(max_tokens=case.max_tokens))
        finally:
            llm.close()
    finally:
        torch.set_num_threads(threads)


def _drive(llm, case: Case, rounds, sp) -> Run:
    if llm.ranks is not None:  # tp > 1: the ranks run the loop; compare rank 0's tokens
        tokens = []
        for r, prompts in enumerate(rounds):
            reqs = [(1000 * r + i, p, sp) for i, p in enumerate(prompts)]
            out = llm.ranks.generate(reqs)
            tokens += [out[uid]["token_ids"] for uid, _, _ in reqs]
        return Run(tokens)
    sched = llm.scheduler
    sched.eos = set(case.eos)
    tokens: list[list[int]] = []
    for r, prompts in enumerate(rounds):
        reqs = [sched.add_request(1000 * r + i, p, sp) for i, p in enumerate(prompts)]
        done, cap, steps = set(), 20 * sum(len(p) + sp.max_tokens for p in prompts), 0
        got = {q.uid: [] for q in reqs}
        while len(done) < len(reqs) or not sched.idle:
            steps += 1
            if steps > cap:
                raise Wrong(f"round {r + 1} never finished: after {cap} calls of step(), "
                            f"{len(reqs) - len(done)} of its {len(reqs)} requests had not finished")
            for o in sched.step():
                if o.token_id >= 0 and o.uid in got:
                    got[o.uid].append(o.token_id)
                if o.finished:
                    done.add(o.uid)
        try:
            sched.check_integrity()
        except AssertionError as e:
            raise Wrong(f"after round {r + 1} the engine's books do not balance: {e}") from None
        tokens += [got[q.uid] for q in reqs]
    sched_rows = [(s.phase, s.batch_size, s.tokens, s.cache_hit_tokens) for s in sched.stats]
    return Run(tokens, sched_rows)


_REFERENCE: dict = {}


def reference(case: Case) -> Run:
    """The library's own run of `case` (computed once per process)."""
    if case not in _REFERENCE:
        _REFERENCE[case] = run_case(case)
    return _REFERENCE[case]


def compare(case: Case, what: str, check_schedule: bool = False, reference_case: Case | None = None) -> None:
    """Run `case` with the current swaps and raise Wrong unless the tokens (and schedule) equal the library's
    on `reference_case` (default: the same case)."""
    ref = reference(reference_case or case)
    try:
        mine = run_case(case)
    except (Wrong, NotAttempted):
        raise
    except Exception as e:
        raise Wrong(f"with your {what} the engine raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
                    f"(case {case.describe()})") from e
    if check_schedule and mine.schedule != ref.schedule:
        k = next(i for i, (a, b) in enumerate(zip(mine.schedule + [None] * 99, ref.schedule + [None] * 99)) if a != b)
        fmt = lambda s: "nothing" if s is None else f"a {s[0]} of {s[1]} request(s), {s[2]} tokens, {s[3]} from the cache"
        raise Wrong(f"with your {what}, step {k} ran {fmt((mine.schedule + [None] * 99)[k])}; the library runs "
                    f"{fmt((ref.schedule + [None] * 99)[k])} (case {case.describe()})")
    for i, (a, b) in enumerate(zip(mine.tokens, ref.tokens)):
        if a != b:
            j = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            raise Wrong(f"with your {what}, request {i} generated {a} but the library generates {b} "
                        f"(first difference at output token {j}; case {case.describe()})")
