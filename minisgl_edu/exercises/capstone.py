"""The capstone: the default model served by the library's engine and by one running every mechanism you
wrote (each attempted build exercise in your folder swapped in), on prompts that exercise them all:
shared prefixes (radix hits and evictions), a small token budget (chunked prefill), page size 4,
the overlap loop and the kernel-argument attention backend. Same tokens, or a report of where not.

    python -m minisgl_edu.exercises capstone [--exercises FOLDER | --solution]
    python -m minisgl_edu.serve --exercises FOLDER      # the full server with your mechanisms
"""
from __future__ import annotations

import time

from .grade import solution_path
from .registry import build_exercises, by_id
from .swap import folder_map, swapped

PROMPTS = ["The capital of France is", "The capital of France is a city that", "Explain a radix tree in one sentence:",
           "Explain a radix tree in one sentence: it is"]


def _generate(exercises, path_of) -> list[tuple[list[int], str]]:
    from .. import LLM, SamplingParams
    with swapped(exercises, path_of):
        llm = LLM(device="cpu", page_size=4, max_prefill_tokens=8, overlap=True, max_total_tokens=4096)
        try:
            out = llm.generate(PROMPTS, SamplingParams(max_tokens=12), use_tqdm=False)
            out += llm.generate(PROMPTS[::-1], SamplingParams(max_tokens=12), use_tqdm=False)  # radix hits
            return [(o["token_ids"], o["text"]) for o in out]
        finally:
            llm.close()


def capstone(folder: str, solution: bool = False) -> int:
    mapping = {e.id: solution_path(e.chapter) for e in build_exercises()} if solution else folder_map(folder)
    exercises = [by_id(i) for i in mapping]
    print(f"your mechanisms: {', '.join(mapping) or 'none yet (every file is still a stub)'}")
    t0 = time.perf_counter()
    ref = _generate([], None)
    t1 = time.perf_counter()
    mine = _generate(exercises, lambda e: mapping[e.id])
    t2 = time.perf_counter()
    same = [a for a, _ in ref] == [b for b, _ in mine]
    prompts = PROMPTS + PROMPTS[::-1]
    for i, ((a, text), (b, _)) in enumerate(zip(ref, mine)):
        print(f"request {i}: {prompts[i]!r} -> {text!r}\n  library {a}\n  yours   {b}{'' if a == b else '   <-- differs'}")
    print(f"library engine {t1 - t0:.1f} s, your engine {t2 - t1:.1f} s; same tokens: {same}")
    return 0 if same else 1
