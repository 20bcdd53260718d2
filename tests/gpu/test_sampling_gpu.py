"""Chapter 9 on the GPU: the sampling controls, logprobs and the grammar mask under overlap scheduling and
CUDA graphs give the same tokens as the normal loop; the CUDA controls equal the CPU ones."""
from __future__ import annotations

import json

import pytest
import torch

from .gpu_helpers import CONFIGS, report
from minisgl_edu import LLM, SamplingParams
from minisgl_edu.req import Req
from minisgl_edu.sampling import SamplingTensors, apply_controls, token_logprobs

PATH = str(CONFIGS / "smollm2-135m")
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 8}},
          "required": ["a", "b"]}


def same_top(a, b, tol: float = 1e-3) -> bool:
    """Two steps' (chosen, top ids, top logprobs) agree: the logprobs within tol, and the ids equal except where
    two candidates tie within tol (graphs and eager round attention differently, so a near tie may swap or, in
    the last place, let a different candidate in)."""
    (_, ia, la), (_, ib, lb) = a, b
    if len(ia) != len(ib) or any(abs(x - y) >= tol for x, y in zip(la, lb)):
        return False
    for j, (x, y) in enumerate(zip(ia, ib)):
        if x != y:
            tied = [i for i in range(len(la)) if abs(la[i] - la[j]) < tol]  # the places x and y could swap among
            if not (j == len(ia) - 1 and len(tied) == 1) and {ia[i] for i in tied} != {ib[i] for i in tied}:
                return False
    return True


def test_same_top_catches_a_different_ranking():
    """The checker above: a near tie may swap, a real difference may not."""
    base = (-0.1, [5, 7, 9], [-0.1, -2.0, -3.0])
    assert same_top(base, base)
    assert same_top(base, (-0.1, [5, 7, 11], [-0.1, -2.0, -3.0005]))  # last place: a near-tied newcomer
    assert same_top((-0.1, [5, 7, 9], [-0.1, -2.0, -2.0004]), (-0.1, [5, 9, 7], [-0.1, -2.0002, -2.0003]))
    assert not same_top(base, (-0.1, [5, 9, 7], [-0.1, -2.0, -3.0]))  # a swap of values 1.0 apart
    assert not same_top(base, (-0.1, [5, 7, 11], [-0.1, -2.0, -3.1]))
    assert not same_top(base, (-0.1, [6, 7, 9], [-0.1, -2.0, -3.0]))


def decode(llm: LLM, prompts, sp):
    reqs = [llm.scheduler.add_request(i, p, sp) for i, p in enumerate(prompts)]
    outs = {}
    while not llm.scheduler.idle:
        for o in llm.scheduler.step():
            outs.setdefault(o.uid, []).append(o.logprobs)
    llm.scheduler.check_integrity()
    return [r.output_ids for r in reqs], [outs[i] for i in range(len(prompts))]


@pytest.mark.parametrize("grammar", [False, True])
def test_controls_overlap_and_graphs_equal_the_normal_loop(grammar):
    if grammar:
        pytest.importorskip("xgrammar")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 49152, (int(n),), generator=g).tolist() for n in (5, 40, 130, 9)]
    sp = SamplingParams(max_tokens=24, ignore_eos=not grammar, repetition_penalty=1.3, presence_penalty=0.5,
                        frequency_penalty=0.4, logit_bias=((11, 3.0),), min_tokens=3, logprobs=3,
                        json_schema=json.dumps(SCHEMA) if grammar else None)
    runs = {}
    for overlap, graphs in [(False, 0), (True, 16)]:
        llm = LLM(PATH, device="cuda", dummy_weights=True, overlap=overlap, cuda_graph_max_bs=graphs,
                  max_total_tokens=16384, max_running_reqs=16)
        runs[overlap] = decode(llm, prompts, sp)
        del llm
        torch.cuda.empty_cache()
    assert runs[True][0] == runs[False][0]
    for a, b in zip(runs[True][1], runs[False][1]):  # logprobs rode back with the tokens, the same both ways
        assert len(a) == len(b) and all(same_top(x, y) for x, y in zip(a, b)), [(x, y) for x, y in zip(a, b) if x != y]
        assert max(abs(x[0] - y[0]) for x, y in zip(a, b)) < 1e-3
    report(check="sampling_controls_overlap_graphs", grammar=grammar, tokens=sum(map(len, runs[True][0])))


def test_cuda_controls_equal_cpu():
    g = torch.Generator().manual_seed(1)
    V, seqs = 1000, [torch.randint(0, 30, (n,), generator=g).tolist() for n in (6, 11, 4)]
    logits = torch.randn(3, V, generator=g) * 3
    sp = SamplingParams(repetition_penalty=1.2, presence_penalty=0.3, frequency_penalty=-0.5,
                        logit_bias=((5, 2.0), (7, -100.0)), min_tokens=5, stop_token_ids=(9,), logprobs=4)
    got = {}
    for dev in ("cpu", "cuda"):
        pool = torch.zeros(4, 64, dtype=torch.int32, device=dev)
        reqs = []
        for i, s in enumerate(seqs):
            r = Req(i, list(s), sp, prompt_len=3)
            r.table_idx, r.device_len = i, len(s)
            pool[i, :len(s)] = torch.tensor(s, device=dev)
            reqs.append(r)
        st = SamplingTensors.from_reqs(reqs, V, torch.device(dev), (2,), pool)
        out = apply_controls(logits.to(dev), st, pool)
        lp = token_logprobs(logits.to(dev), out.argmax(-1).int(), 4)
        got[dev] = (out.cpu(), lp.chosen.cpu(), lp.top_ids.cpu())
    torch.testing.assert_close(got["cuda"][0], got["cpu"][0])
    torch.testing.assert_close(got["cuda"][1], got["cpu"][1])
    assert torch.equal(got["cuda"][2], got["cpu"][2])
