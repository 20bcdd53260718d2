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


# ---- greedy sampling in one launch (model/greedy.cu; issue 16) -------------------------------------------------
def hard_rows(vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Rows whose argmax a careless kernel gets wrong: equal maxima, only negative values, -0.0 beside +0.0, a NaN,
    two NaNs, -inf everywhere but one, the maximum in the last slot; then random rows."""
    rows = [torch.full((vocab,), -3.0)]
    rows[0][[5, vocab - 2]] = 7.0  # a tie: the first wins
    rows.append(-torch.rand(vocab, generator=gen) - 1.0)  # all negative
    z = torch.full((vocab,), -1.0); z[3], z[vocab - 1] = -0.0, 0.0; rows.append(z)  # -0.0 == +0.0: index 3
    n = torch.randn(vocab, generator=gen); n[vocab // 2] = float("nan"); rows.append(n)
    n2 = torch.randn(vocab, generator=gen); n2[[vocab - 3, 4]] = float("nan"); rows.append(n2)  # the first NaN
    f = torch.full((vocab,), float("-inf")); f[vocab - 1] = -1e30; rows.append(f)
    last = torch.randn(vocab, generator=gen); last[-1] = 100.0; rows.append(last)
    rows += list(torch.randn(5, vocab, generator=gen))
    return torch.stack(rows).to(torch.bfloat16)


def greedy_mismatches(fn, vocab: int, offset: int = 0) -> int:
    """Rows where fn(logits) differs from torch.argmax, over hard_rows (offset: the rows start `offset` elements
    into their buffer, which breaks 16-byte alignment when odd)."""
    x = hard_rows(vocab, torch.Generator().manual_seed(vocab)).cuda()
    buf = torch.empty(x.numel() + offset, dtype=x.dtype, device="cuda")
    view = buf[offset:].view(x.shape)
    view.copy_(x)
    return int((fn(view).long() != x.argmax(-1)).sum())


@pytest.mark.parametrize("vocab,offset", [(151936, 0), (49152, 0), (49152, 1), (1003, 0), (7, 0)])
def test_greedy_kernel_is_torch_argmax(vocab, offset):
    """The kernel's token is torch.argmax's on every hard row, with vector loads (vocab % 8 == 0, aligned) or
    without; and the two wrong argmaxes kept here are caught by the same rows."""
    from minisgl_edu.model.qk_kernel import greedy
    if greedy(torch.zeros(1, 8, dtype=torch.bfloat16, device="cuda")) is None:
        pytest.skip("no greedy.cubin (scripts/build_fi_extra_kernels.sh) or not an sm_90 device")
    assert greedy_mismatches(greedy, vocab, offset) == 0
    last_of_ties = lambda x: x.shape[-1] - 1 - x.flip(-1).argmax(-1)  # wrong: the last of equal maxima
    nan_blind = lambda x: torch.nan_to_num(x.float(), nan=float("-inf")).argmax(-1)  # wrong: skips NaN
    assert greedy_mismatches(last_of_ties, vocab, offset) > 0 and greedy_mismatches(nan_blind, vocab, offset) > 0


def test_greedy_kernel_writes_the_token_pool_and_runs_again():
    """Tokens land at token_pool[rows, pos] and nowhere else; back-to-back launches (the row counters are reset by
    each launch) and 256 rows give torch.argmax's tokens."""
    from minisgl_edu.model.qk_kernel import greedy
    if greedy(torch.zeros(1, 8, dtype=torch.bfloat16, device="cuda")) is None:
        pytest.skip("no greedy.cubin (scripts/build_fi_extra_kernels.sh) or not an sm_90 device")
    g = torch.Generator(device="cuda").manual_seed(0)
    pool = torch.full((300, 64), -1, dtype=torch.int32, device="cuda")
    for n in (256, 3, 256, 1):
        logits = torch.randn(n, 151936, generator=g, device="cuda").to(torch.bfloat16)
        rows = torch.randperm(300, device="cuda")[:n]
        pos = torch.randint(0, 64, (n,), device="cuda")
        before = pool.clone()
        tokens = greedy(logits, rows, pos, pool)
        want = logits.argmax(-1).to(torch.int32)
        assert torch.equal(tokens, want)
        before[rows, pos] = want
        assert torch.equal(pool, before)


def test_greedy_kernel_on_two_streams_at_once():
    """Two streams launching the kernel back to back without waiting for each other (two engines in one process)
    each get torch.argmax's tokens: each stream has its own row counters."""
    from minisgl_edu.model.qk_kernel import greedy
    if greedy(torch.zeros(1, 8, dtype=torch.bfloat16, device="cuda")) is None:
        pytest.skip("no greedy.cubin (scripts/build_fi_extra_kernels.sh) or not an sm_90 device")
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(256, 151936, generator=g, device="cuda").to(torch.bfloat16) for _ in range(4)]
    wants = [x.argmax(-1).to(torch.int32) for x in xs]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = []
    for _ in range(10):
        for i, x in enumerate(xs):
            with torch.cuda.stream(streams[i % 2]):
                outs.append((i, greedy(x)))
    torch.cuda.synchronize()
    assert all(torch.equal(t, wants[i]) for i, t in outs)
