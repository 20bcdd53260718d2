"""CUDA-graph replay == eager forward for every captured decode size; padding lanes touch only the dummy page."""
from __future__ import annotations

import torch

from .gpu_helpers import CONFIGS, report
from minisgl_edu.engine import Engine, EngineConfig
from minisgl_edu.graphs import capture_sizes
from minisgl_edu.req import Batch, Req, SamplingParams

MAX_BS = 16
TOL = 1e-2  # bf16: graph and eager run different GEMM shapes (padded vs not)


def prefill(engine, reqs):
    pool = engine.pool
    for r in reqs:
        r.table_idx = pool.take_row()
        r.device_len = r.prompt_len
        pool.token_pool[r.table_idx, : r.prompt_len] = torch.tensor(r.token_ids, dtype=torch.int32)
    batch = Batch(reqs, "prefill")
    batch.out_loc = pool.assign_locations(reqs)
    engine.forward(batch)
    for r in reqs:
        r.complete_one()


def hidden(engine, batch, graph: bool) -> torch.Tensor:
    batch.padded_size = engine.graphs.padded_size(batch.size) if graph else 0
    with torch.inference_mode():
        engine.prepare(batch)
        h = engine.graphs.replay(batch) if graph else engine.model(batch.input_ids, batch.positions, engine.backend, batch)
    return h.float().clone()


def test_graph_replay_equals_eager_for_every_captured_size():
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=16384, cuda_graph_max_bs=MAX_BS))
    assert engine.graphs is not None and engine.graphs.sizes == capture_sizes(MAX_BS) == [1, 2, 4, 8, 16]
    g = torch.Generator().manual_seed(0)
    reqs = [Req(i, torch.randint(0, 49152, (int(n),), generator=g).tolist(), SamplingParams(max_tokens=8))
            for i, n in enumerate(torch.randint(5, 400, (MAX_BS,), generator=g))]
    prefill(engine, reqs)
    kv = engine.kv
    dummy = slice(engine.pool.num_pages * engine.pool.page_size, None)
    for bs in sorted({s for s in engine.graphs.sizes} | {s - 1 for s in engine.graphs.sizes if s > 2}):
        batch = Batch(reqs[:bs], "decode")
        batch.out_loc = engine.pool.assign_locations(batch.reqs)
        want = hidden(engine, batch, graph=False)
        k_before = kv.k.clone()
        got = hidden(engine, batch, graph=True)
        torch.cuda.synchronize()
        err = ((got - want).norm() / want.norm()).item()
        report(check="graph_replay_vs_eager", batch_size=bs, padded_to=batch.padded_size, rel_err=err)
        assert got.shape == want.shape and err < TOL, (bs, err)
        # padded lanes (and real lanes) wrote nothing outside this step's out_loc and the dummy page
        changed = (kv.k != k_before).flatten(2).any(-1).any(0)  # [slots]
        changed[batch.out_loc.long()] = False
        changed[dummy] = False
        assert not changed.any(), f"bs {bs}: slots {changed.nonzero()[:5].tolist()} changed"
        for r in batch.reqs:
            r.complete_one()
    engine.graphs.replay  # still usable after many replays
    assert torch.isfinite(got).all()
