"""Issue 16: the lean step on CUDA (bf16, CUDA graphs, overlap) gives the plain step's tokens; the greedy
argmax on the LM head's bf16 logits picks the index the float32 copy picks (the copy is exact: same values,
same ties)."""
from __future__ import annotations

import random

import torch

from .gpu_helpers import CONFIGS, report
from minisgl_edu import LLM, SamplingParams
from minisgl_edu.bench import fresh_scheduler


def test_bf16_argmax_equals_float32_argmax():
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(256, 151936, device="cuda", generator=g).to(torch.bfloat16) * 4
    logits[::3, 777] = logits[::3].max(-1).values  # ties: the first maximum wins in both
    logits[1::3, -1] = logits[1::3].max(-1).values
    assert torch.equal(logits.argmax(-1), logits.float().argmax(-1))


def workload(vocab: int):
    rnd = random.Random(5)
    prompts = [[rnd.randint(0, vocab - 1) for _ in range(rnd.randint(5, 400))] for _ in range(24)]
    controls = [{}, {}, {}, {"temperature": 0.8, "seed": 11}, {"logprobs": 2}, {"repetition_penalty": 1.3},
                {"logit_bias": ((5, 3.0),)}, {"min_tokens": 3, "stop_token_ids": (9,)}]
    params = [SamplingParams(max_tokens=rnd.randint(8, 64), ignore_eos=True, **controls[i % len(controls)])
              for i in range(len(prompts))]
    return prompts, params


def test_lean_step_tokens_equal_plain_step_on_cuda():
    llm = LLM(str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True, cuda_graph_max_bs=32,
              max_total_tokens=65536, max_prefill_tokens=2048)
    prompts, params = workload(llm.engine.vocab_size)
    got = {}
    for lean in (False, True):
        llm.engine.lean_step = lean
        fresh_scheduler(llm, overlap=True)
        got[lean] = [(o["token_ids"], o["finish_reason"]) for o in llm.generate(prompts, params, use_tqdm=False)]
        llm.scheduler.check_integrity()
    greedy = [sp.temperature == 0 for sp in params]
    same = sum(a == b for a, b in zip(got[True], got[False]))
    report(check="lean_step_tokens", requests=len(prompts), identical=same)
    assert same == len(prompts), [i for i, (a, b) in enumerate(zip(got[True], got[False])) if a != b]
    assert any(greedy) and not all(greedy)
    # the greedy-only batch (no control): the bf16 argmax path, graphs at batch 1 and 8
    plain = [SamplingParams(max_tokens=40, ignore_eos=True)] * 8
    runs = []
    for lean in (False, True):
        llm.engine.lean_step = lean
        fresh_scheduler(llm, overlap=True)
        runs.append([o["token_ids"] for o in llm.generate(prompts[:8], plain, use_tqdm=False)])
        runs.append([o["token_ids"] for o in llm.generate(prompts[:1], plain[:1], use_tqdm=False)])
    assert runs[0] == runs[2] and runs[1] == runs[3]
