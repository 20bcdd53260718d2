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
        # gemv_kernel off: one row takes our GEMV and two take cuBLAS, and overlap's extra in-flight step keeps a
        # finished request's row beside the last one, so the runs would differ by kernel rounding, not by the controls
        llm = LLM(PATH, device="cuda", dummy_weights=True, overlap=overlap, cuda_graph_max_bs=graphs,
                  max_total_tokens=16384, max_running_reqs=16, gemv_kernel=False)
        runs[overlap] = decode(llm, prompts, sp)
        del llm
        torch.cuda.empty_cache()
    assert runs[True][0] == runs[False][0]
    for a, b in zip(runs[True][1], runs[False][1]):  # logprobs rode back with the tokens, the same both ways
        assert [x[1] for x in a] == [x[1] for x in b]
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
