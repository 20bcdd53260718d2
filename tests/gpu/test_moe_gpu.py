"""Chapter 10 on CUDA: the grouped MoE path (torch's grouped GEMM) equals the reference within the
bf16 tolerance, and replays from a CUDA graph exactly (scripts/gpu_moe.sh runs the full check)."""
from __future__ import annotations

import pytest
import torch

from .gpu_helpers import report
from minisgl_edu.model.moe import Routing, experts_grouped, experts_reference, route

TOL = 2e-2  # bf16 through two GEMMs and SiLU: ||out - ref32|| / ||ref32||
E, H, I, K = 32, 1024, 512, 4


def weights(g):
    return torch.randn(E, 2 * I, H, generator=g) / H ** 0.5, torch.randn(E, H, I, generator=g) / I ** 0.5


def rel(a, b):
    return ((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm()).item()


@pytest.mark.parametrize("tokens", [1, 7, 64, 512])
def test_grouped_equals_reference_in_bf16(tokens):
    g = torch.Generator().manual_seed(tokens)
    gate_up, down = weights(g)
    x = torch.randn(tokens, H, generator=g)
    r32 = route(torch.randn(tokens, E, generator=g), K, True)
    ref32 = experts_reference(x, r32, gate_up, down)
    cuda = lambda t: t.cuda().bfloat16()
    r = Routing(cuda(r32.weights), r32.experts.cuda())  # one routing: compare the expert maths
    grouped = experts_grouped(cuda(x), r, cuda(gate_up), cuda(down))
    refb = experts_reference(cuda(x), r, cuda(gate_up), cuda(down))
    err, own = rel(grouped, ref32), rel(refb, ref32)
    report(check="moe_grouped_vs_ref32", tokens=tokens, rel=err, ref_bf16_rel=own, tol=TOL)
    assert err <= TOL and err <= 2 * own + 1e-3, (err, own)


def test_grouped_layer_replays_from_a_cuda_graph():
    g = torch.Generator().manual_seed(0)
    gate_up, down = (w.cuda().bfloat16() for w in weights(g))
    x = torch.randn(64, H, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(64, E, device="cuda", dtype=torch.bfloat16)
    run = lambda: experts_grouped(x, route(logits, K, True), gate_up, down)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    x.copy_(torch.randn_like(x))  # new tokens and new routing, same buffers
    logits.copy_(torch.randn_like(logits))
    graph.replay()
    diff = rel(out, run())
    report(check="moe_graph_replay_vs_eager", rel=diff)
    assert diff < 1e-6
