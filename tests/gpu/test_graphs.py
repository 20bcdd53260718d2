"""CUDA-graph replay == eager forward for every captured decode size, and for prefill / mixed steps in their
(requests, tokens) graphs; padding lanes (and the slack lane) touch only the dummy page."""
from __future__ import annotations

import pytest
import torch

from .gpu_helpers import CONFIGS, report
from minisgl_edu.engine import Engine, EngineConfig
from minisgl_edu.graphs import capture_sizes, extend_capacities
from minisgl_edu.req import Batch, Req, SamplingParams

MAX_BS = 16
TOL = 1e-2  # bf16: graph and eager run different GEMM shapes (padded vs not)
PREFILL_TOL = 2e-2  # ... and a prefill graph's planner tiles the attention otherwise (no split-KV, fixed tile size)


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


def test_graph_head_equals_the_launched_head():
    """cfg.graph_head: the decode graphs end in the LM head and the greedy argmax. On the same hidden states the
    graph's logits equal the launched head's (bit for bit where the batch fills its graph: the same product; within
    bf16 tolerance where padding rows change the product's shape), its tokens are their argmax exactly, and each
    token lands at its request's (row, device_len) in the token pool, nowhere else but the dummy row. The mutant keeps
    the last step's page-table rows in the padding lanes (the reset dropped from `replay`): it writes into a request
    that is not in the step, and is caught."""
    import types

    from minisgl_edu.exercises.swap import patched
    from minisgl_edu.graphs import GraphRunner
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=16384, cuda_graph_max_bs=MAX_BS))
    runner, pool = engine.graphs, engine.pool
    assert runner.head and runner.greedy
    stale = patched("minisgl_edu.graphs:GraphRunner.replay",
                    ("self.sample_rows[bs:pbs].fill_(self.engine.pool.dummy_row)", "pass"))
    g = torch.Generator().manual_seed(3)
    for wrong, replay in ((False, GraphRunner.replay), (True, stale)):
        runner.replay = types.MethodType(replay, runner)
        reqs = [Req(i, torch.randint(0, 49152, (int(n),), generator=g).tolist(), SamplingParams(max_tokens=8))
                for i, n in enumerate(torch.randint(5, 300, (MAX_BS,), generator=g))]
        prefill(engine, reqs)
        scribbled = 0
        for bs in (8, 5, 16, 13, 1):  # 8 then 5 (the same graph): lanes 5-7 held rows the second step must not touch
            batch = Batch(reqs[:bs], "decode")
            batch.out_loc = pool.assign_locations(batch.reqs)
            batch.padded_size = runner.padded_size(bs)
            for r in reqs[bs:]:  # requests outside the step: a write to their rows shows (7: a valid next input)
                pool.token_pool[r.table_idx] = 7
            before = pool.token_pool.clone()
            with torch.inference_mode():
                engine.prepare(batch)
                lay = engine.layout
                h = runner.replay(batch, (lay.sample_table_rows, lay.sample_device_len))
                logits, tokens = runner.head_out(batch)
                logits, tokens = logits.clone(), tokens.clone()
                launched = engine.model.logits(h)
            torch.cuda.synchronize()
            rows = torch.tensor([r.table_idx for r in batch.reqs], device="cuda")
            pos = torch.tensor([r.device_len for r in batch.reqs], device="cuda")
            after = pool.token_pool.clone()
            ok_pool = torch.equal(after[rows, pos], tokens)
            after[rows, pos], after[pool.dummy_row] = before[rows, pos], before[pool.dummy_row]
            scribbled += int((after != before).sum())
            err = ((logits.float() - launched.float()).norm() / launched.float().norm()).item()
            report(check="graph_head_vs_launched", wrong=wrong, batch_size=bs, padded_to=batch.padded_size,
                   rel_err=err, bit_equal=torch.equal(logits, launched), scribbled=scribbled)
            if not wrong:
                assert ok_pool and torch.equal(tokens, logits.argmax(-1).int()), bs
                assert err < TOL, (bs, err)
                if batch.padded_size == bs:
                    assert torch.equal(logits, launched), bs
            for r in batch.reqs:
                r.complete_one()
        assert (scribbled > 0) == wrong, (wrong, scribbled)
        for r in reqs:
            pool.free_tail(r, 0)
            pool.release_row(r.table_idx)


def new_req(engine, uid, n, g):
    r = Req(uid, torch.randint(0, 49152, (n,), generator=g).tolist(), SamplingParams(max_tokens=8))
    r.table_idx, r.device_len = engine.pool.take_row(), n
    engine.pool.token_pool[r.table_idx, :n] = torch.tensor(r.token_ids, dtype=torch.int32)
    return r


def prefill_hidden(engine, batch, graph: bool) -> torch.Tensor:
    key = engine.graphs.prefill_key(batch) if graph else None
    assert (key is not None) == graph, "the shape fits no prefill graph"
    batch.padded_size, batch.padded_tokens = key or (0, 0)
    with torch.inference_mode():
        engine.prepare(batch)
        h = engine.graphs.replay_prefill(batch) if graph else \
            engine.model(batch.input_ids, batch.positions, engine.backend, batch)
    return h.float().clone()


@pytest.mark.parametrize("split_mixed", [True, False])
def test_prefill_graph_replay_equals_eager(split_mixed, monkeypatch):
    """Mixed steps either way: decode rows through the decode kernel (split), or lanes of the one prefill kernel."""
    import minisgl_edu.attention.flashinfer as fi
    monkeypatch.setattr(fi, "SPLIT_MIXED", split_mixed)
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=16384, cuda_graph_max_bs=MAX_BS,
                                 cuda_graph_max_extend=512))
    assert extend_capacities(512) == [256, 512] and extend_capacities(2048) == [256, 512, 768, 1024, 1536, 2048]
    assert engine.graphs.prefill_keys == [(d, c) for d in (0, 1, 2, 4, 8, 16) for c in (256, 512)]
    g = torch.Generator().manual_seed(1)
    decoding = [Req(100 + i, torch.randint(0, 49152, (int(n),), generator=g).tolist(), SamplingParams(max_tokens=8))
                for i, n in enumerate(torch.randint(5, 400, (7,), generator=g))]
    prefill(engine, decoding)
    kv, dummy = engine.kv, slice(engine.pool.num_pages * engine.pool.page_size, None)
    chunked = new_req(engine, 1, 600, g)
    chunked.device_len = 200  # its first chunk: [0, 200) this step, the rest later from cached_len 200
    shapes = {"one prompt alone": [new_req(engine, 0, 100, g)], "first chunk of a long prompt": [chunked],
              "7 decode rows + a prompt of 300": decoding + [new_req(engine, 2, 300, g)],
              "4 decode rows (no decode padding) + a prompt of 50": decoding[:4] + [new_req(engine, 20, 50, g)]}
    for name, reqs in shapes.items():
        batch = Batch(reqs, "prefill", decode_rows=sum(r.is_decoding for r in reqs))  # decode rows first
        batch.out_loc = engine.pool.assign_locations(reqs)
        want = prefill_hidden(engine, batch, graph=False)
        if batch.decode_rows:  # the decode kernel on the decode rows == the prefill kernel on every row
            plain = Batch(reqs, "prefill")
            plain.out_loc = batch.out_loc
            ref = prefill_hidden(engine, plain, graph=False)
            err = ((want - ref).norm() / ref.norm()).item()
            report(check="mixed_split_attention_vs_one_prefill_kernel", shape=name, rel_err=err)
            assert err < TOL, (name, err)
        k_before = kv.k.clone()
        got = prefill_hidden(engine, batch, graph=True)
        torch.cuda.synchronize()
        err = ((got - want).norm() / want.norm()).item()
        report(check="prefill_graph_vs_eager", shape=name, graph=[batch.padded_size, batch.padded_tokens], rel_err=err,
               split_mixed=split_mixed)
        assert got.shape == want.shape and err < PREFILL_TOL, (name, err)
        changed = (kv.k != k_before).flatten(2).any(-1).any(0)
        changed[batch.out_loc.long()] = False
        changed[dummy] = False
        assert not changed.any(), f"{name}: slots {changed.nonzero()[:5].tolist()} changed"
        for r in reqs:
            r.complete_one() if not r.is_chunked else setattr(r, "cached_len", r.device_len)
    chunked.device_len = 600  # the rest of the chunked prompt continues from its cached prefix
    batch = Batch([chunked], "prefill")
    batch.out_loc = engine.pool.assign_locations([chunked])
    want, got = prefill_hidden(engine, batch, graph=False), prefill_hidden(engine, batch, graph=True)
    err = ((got - want).norm() / want.norm()).item()
    report(check="prefill_graph_vs_eager", shape="second chunk (400 tokens after 200 cached)", rel_err=err)
    assert err < PREFILL_TOL, err
    big = Batch([new_req(engine, 3, 1000, g)], "prefill")  # more than any graph holds: eager
    assert engine.graphs.prefill_key(big) is None
    four = Batch([new_req(engine, 4 + i, 10, g) for i in range(4)], "prefill")  # more prompts than lanes: eager
    assert engine.graphs.prefill_key(four) is None


def test_stale_slots_left_in_the_slack_are_caught():
    """The slack lane after a graph's prompt rows must write only the dummy page: a replay that leaves the
    last step's slots there (the wrong `replay_prefill` kept here) overwrites that step's K/V, and is caught."""
    import types

    from minisgl_edu.exercises.swap import patched
    from minisgl_edu.graphs import GraphRunner
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=16384, cuda_graph_max_bs=MAX_BS,
                                 cuda_graph_max_extend=512))
    stale = patched("minisgl_edu.graphs:GraphRunner.replay_prefill",
                    ("self.out_loc[dp + n - d:dp + t].fill_(self.dummy_slot)", "pass"))
    kv, dummy = engine.kv, slice(engine.pool.num_pages * engine.pool.page_size, None)
    g = torch.Generator().manual_seed(2)
    for i, (replay, wrong) in enumerate(((GraphRunner.replay_prefill, False), (stale, True))):
        engine.graphs.replay_prefill = types.MethodType(replay, engine.graphs)
        big = Batch([new_req(engine, 10 + 2 * i, 240, g)], "prefill")  # fills the graph's slots up to row 240
        big.out_loc = engine.pool.assign_locations(big.reqs)
        prefill_hidden(engine, big, graph=True)
        small = Batch([new_req(engine, 11 + 2 * i, 50, g)], "prefill")  # same (0, 256) graph, 50 real rows
        small.out_loc = engine.pool.assign_locations(small.reqs)
        k_before = kv.k.clone()
        prefill_hidden(engine, small, graph=True)
        torch.cuda.synchronize()
        changed = (kv.k != k_before).flatten(2).any(-1).any(0)
        changed[small.out_loc.long()] = False
        changed[dummy] = False
        report(check="stale_slack_slots_caught", wrong=wrong, slots_overwritten=int(changed.sum()))
        assert bool(changed.any()) == wrong, (wrong, int(changed.sum()))


def mixed_engine(parallel: bool, monkeypatch) -> Engine:
    import minisgl_edu.attention.flashinfer as fi
    monkeypatch.setattr(fi, "PARALLEL_MIXED", parallel)
    return Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                               max_running_reqs=MAX_BS, max_total_tokens=16384, cuda_graph_max_bs=MAX_BS,
                               cuda_graph_max_extend=512))


def test_mixed_attention_side_by_side_equals_one_after_the_other(monkeypatch):
    """PARALLEL_MIXED: a mixed step's decode-row attention on a second stream beside the prompts' changes no number,
    eagerly or in a graph replay (the same kernels, the same plans): the hidden states are equal bit for bit."""
    got = {}
    for parallel in (False, True):
        engine = mixed_engine(parallel, monkeypatch)
        assert (engine.backend.side is not None) == parallel
        g = torch.Generator().manual_seed(3)  # the same requests, the same slots, in both engines
        decoding = [Req(100 + i, torch.randint(0, 49152, (int(n),), generator=g).tolist(), SamplingParams(max_tokens=8))
                    for i, n in enumerate(torch.randint(5, 400, (7,), generator=g))]
        prefill(engine, decoding)
        for graph, n in ((False, 700), (True, 300)):  # 700 prompt rows: more than a graph holds (eager)
            batch = Batch(decoding + [new_req(engine, 2 + n, n, g)], "prefill", decode_rows=len(decoding))
            batch.out_loc = engine.pool.assign_locations(batch.reqs)
            got[parallel, graph] = prefill_hidden(engine, batch, graph=graph)
            for r in batch.reqs:
                r.complete_one()
        del engine
        torch.cuda.empty_cache()
    for graph in (False, True):
        assert torch.equal(got[True, graph], got[False, graph]), f"graph={graph}"
        report(check="mixed_attention_side_by_side_vs_serial", graph=graph, bitwise_equal=True)


WITHOUT_JOIN = '''
import sys, torch
sys.path.insert(0, {root!r})
import minisgl_edu.attention.flashinfer as fi
from minisgl_edu.engine import Engine, EngineConfig
def attend(self, q, layer, batch):  # the wrong implementation: the decode rows' stream never joins back
    md = batch.attn_metadata
    if not md.split:
        return md.wrapper.run(q, self.pages[layer])
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    self.side.wait_stream(torch.cuda.current_stream(q.device))
    with torch.cuda.stream(self.side):
        md.decode.run(q[:md.split], self.pages[layer], out=out[:md.split])
    md.wrapper.run(q[md.split:], self.pages[layer], out=out[md.split:])
    return out
fi.FlashInferBackend.attend = attend
Engine(EngineConfig(model_path={model!r}, device="cuda", dummy_weights=True, max_running_reqs=16,
                    max_total_tokens=16384, cuda_graph_max_bs=16, cuda_graph_max_extend=256))
print("captured")
'''


def test_a_side_stream_that_never_joins_fails_the_capture():
    """The mutant the test above would miss on its own if eager runs hid the race: without the join, capturing a
    mixed graph fails (CUDA refuses to end a capture with unjoined work), so the engine does not start."""
    import pathlib
    import subprocess
    import sys
    root = str(pathlib.Path(__file__).resolve().parents[2])
    code = WITHOUT_JOIN.format(root=root, model=str(CONFIGS / "smollm2-135m"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    report(check="side_stream_without_join_fails_capture", returncode=r.returncode, tail=r.stderr[-300:])
    assert r.returncode != 0 and "captured" not in r.stdout, r.stdout[-500:]
    assert "captur" in r.stderr.lower(), r.stderr[-2000:]


def balanced_engine(monkeypatch):
    """A SmolLM2 engine with graphs up to MAX_BS whose balanced-decode thresholds are lowered so that 16 requests
    qualify; returns (the flashinfer backend module, the engine)."""
    import minisgl_edu.attention.flashinfer as fi
    monkeypatch.setattr(fi, "BALANCED_MIN_BS", 8)
    monkeypatch.setattr(fi, "BALANCED_MIN_KV_BYTES", 0)
    return fi, Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                   max_running_reqs=MAX_BS, max_total_tokens=32768, cuda_graph_max_bs=MAX_BS,
                                   cuda_graph_max_extend=0))


def uneven_step(engine) -> tuple[list[Req], Batch]:
    """15 requests (a graph of 16) of 100 and 1,500 tokens (longest / mean 2.6), prefilled; their decode step."""
    g = torch.Generator().manual_seed(5)
    reqs = [Req(i, torch.randint(0, 49152, (n,), generator=g).tolist(), SamplingParams(max_tokens=8))
            for i, n in enumerate([100] * 10 + [1500] * 5)]
    for i in range(0, len(reqs), 5):
        prefill(engine, reqs[i:i + 5])
    batch = Batch(reqs, "decode")
    batch.out_loc = engine.pool.assign_locations(reqs)
    return reqs, batch


def test_balanced_decode_for_uneven_contexts_equals_the_default_kernel(monkeypatch):
    """BALANCED_DECODE: an uneven decode step goes through the tensor-core kernel, in its own graph of that batch
    size, and gives what the CUDA-core kernel gives (PREFILL_TOL: it is the prefill kernel, tiled otherwise); an even
    step stays on the CUDA-core graph. The thresholds are lowered so that 16 SmolLM2 requests qualify."""
    fi, engine = balanced_engine(monkeypatch)
    backend = engine.backend
    assert backend.balanced and sorted(backend.balanced_wrappers) == sorted(engine.graphs.balanced_graphs) == [8, 16]
    reqs, batch = uneven_step(engine)
    backend.balanced = False  # the reference: the CUDA-core kernel, eager
    want = hidden(engine, batch, graph=False)
    assert not batch.balanced
    backend.balanced = True
    got = {}
    for graph in (False, True):
        got[graph] = hidden(engine, batch, graph=graph)
        assert batch.balanced, graph
        err = ((got[graph] - want).norm() / want.norm()).item()
        report(check="balanced_decode_vs_cuda_core", graph=graph, rel_err=err)
        assert 0 < err < PREFILL_TOL, (graph, err)  # the other kernel (not 0) and close: 1.16e-2 on the H200
    assert torch.equal(got[True], got[False])  # the balanced graph replayed: bit for bit its eager step
    runner = engine.graphs  # the mutant: a runner that replays the CUDA-core graph although the plan chose balanced
    saved = runner.balanced_graphs, runner.balanced_outputs
    runner.balanced_graphs, runner.balanced_outputs = runner.graphs, runner.outputs
    try:
        wrong = hidden(engine, batch, graph=True)
    finally:
        runner.balanced_graphs, runner.balanced_outputs = saved
    assert batch.balanced and not torch.equal(wrong, got[False])  # caught: the check above would fail on it
    even = Batch(reqs[:10], "decode")  # ten requests of 100 tokens (their next slots are assigned already)
    even.out_loc = batch.out_loc[:10]
    hidden(engine, even, graph=True)
    assert not even.balanced


def test_unsplit_tensor_core_graphs_finish_and_give_what_the_split_ones_give(monkeypatch):
    """TC_WHOLE: the balanced graphs planned unsplit (no partial outputs, no merge, and no valid-block mask) finish
    their steps and give what the split plans give, within the tiling's tolerance of the CUDA-core kernel. Their spare
    blocks compute request 0 again (clean_schedule zeroed their entries) or, with SPARE_LANE, go to one more lane with
    no query row, and write nothing: the two give the same bits. Session 18's unsplit graphs never finished a step,
    before clean_schedule. One engine each way (a graph holds its plan's kernels)."""
    import minisgl_edu.attention.flashinfer as fi
    got, grids = {}, {}
    for way, whole, lane in (("split", False, False), ("request0", True, False), ("lane", True, True)):
        monkeypatch.setattr(fi, "TC_WHOLE", whole)
        monkeypatch.setattr(fi, "SPARE_LANE", lane)
        monkeypatch.setattr(fi, "split_reqs", lambda *a: 8)  # SmolLM2's 3 KV heads: 88 on 132 SMs; the 16 past it
        _, engine = balanced_engine(monkeypatch)
        _, batch = uneven_step(engine)
        if way == "split":  # the reference: the CUDA-core kernel, eager (the same dummy weights in every engine)
            engine.backend.balanced = False
            want = hidden(engine, batch, graph=False)
            engine.backend.balanced = True
        got[way] = hidden(engine, batch, graph=True)
        w = batch.attn_metadata.wrapper
        assert batch.balanced and w.use_tensor_cores and fi.whole_tc(w) == whole
        lanes = MAX_BS + lane
        assert len(w._paged_kv_last_page_len_buf) == lanes and int(w._qo_indptr_buf[-1]) == MAX_BS
        grid = fi.prefill_grid(w._plan_info)
        real = grid.real_blocks([1] * lanes, engine.backend.q_heads // engine.backend.kv_heads)
        grids[way] = (grid.split, grid.blocks - real, set(grid.requests(w._int_workspace_buffer)[real:].tolist()))
        del engine
    report(check="tc_whole_vs_split", grids={k: v[:2] for k, v in grids.items()},
           rel_err={k: ((v - want).norm() / want.norm()).item() for k, v in got.items()})
    assert grids["split"][0] and not grids["request0"][0] and not grids["lane"][0]  # a merge only where split
    assert grids["request0"][1] > 0 and grids["request0"][2] == {0}  # spare blocks, each on request 0
    assert grids["lane"][1] > 0 and grids["lane"][2] == {MAX_BS}  # ... or on the spare lane
    for way in got:
        assert ((got[way] - want).norm() / want.norm()).item() < PREFILL_TOL, way
    assert ((got["request0"] - got["split"]).norm() / got["split"].norm()).item() < PREFILL_TOL
    assert torch.equal(got["lane"], got["request0"])  # the spare blocks wrote nothing either way that counts


def test_the_wave_rule_learns_one_wave_from_the_graph_plans(monkeypatch):
    """WAVE_BALANCED: the CUDA-core graphs' plans tell how many requests one wave of their kernel holds (a plan that
    splits keys pads its grid to one wave); an even step just past that takes the balanced graph, one within it does
    not. SmolLM2's 16-request graphs all split, so the wave is learnt; a wave of 12 is then set to try the rule."""
    fi, engine = balanced_engine(monkeypatch)
    backend = engine.backend
    learnt = fi.wave_of(backend.graph_wrappers[MAX_BS, 0]._plan_info)
    report(check="wave_reqs", smollm2=backend.wave_reqs)
    assert backend.wave_reqs == learnt > MAX_BS
    g = torch.Generator().manual_seed(6)
    reqs = [Req(i, torch.randint(0, 49152, (300,), generator=g).tolist(), SamplingParams(max_tokens=8)) for i in range(15)]
    for i in range(0, len(reqs), 5):
        prefill(engine, reqs[i:i + 5])
    batch = Batch(reqs, "decode")
    batch.out_loc = engine.pool.assign_locations(reqs)
    hidden(engine, batch, graph=True)
    assert not batch.balanced  # even, and 15 requests are well inside one wave
    backend.wave_reqs = 12  # 15 requests: 1.25 waves
    hidden(engine, batch, graph=True)
    assert batch.balanced
    within = Batch(reqs[:10], "decode")
    within.out_loc = batch.out_loc[:10]
    hidden(engine, within, graph=True)
    assert not within.balanced
    monkeypatch.setattr(fi, "WAVE_BALANCED", False)  # the twin learns nothing from its plans
    backend.wave_reqs = 0
    hidden(engine, batch, graph=True)
    assert backend.wave_reqs == 0 and not batch.balanced


def slots_written_outside_the_dummy_page(kv, before: torch.Tensor) -> list[int]:
    """The pool check: slots (outside the dummy page) whose K or V differ from the snapshot `before`."""
    dummy = kv.dummy_page * (kv.kv.shape[2] // (kv.dummy_page + 1))
    changed = (kv.kv != before).flatten(3).any(-1).any(1).any(0)  # [slots]
    return changed[:dummy].nonzero().flatten().tolist()


def test_capture_and_warm_start_write_only_the_dummy_page():
    """Building the graphs (two eager warm-up forwards, the capture, warm start's one replay of each graph) over a
    pool full of someone's K/V changes no slot but the dummy page's. The mutant: a replay whose out_loc points at
    slot 0 (a stale real slot) is caught by the same check."""
    from minisgl_edu.graphs import GraphRunner
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=8192, cuda_graph_max_bs=0,
                                 cuda_graph_max_extend=512))
    assert engine.graphs is None and engine.cfg.warm_start
    kv = engine.kv
    kv.kv.normal_(generator=torch.Generator(kv.kv.device).manual_seed(0))  # every slot holds a value
    before = kv.kv.clone()
    runner = GraphRunner(engine, MAX_BS, progress=False)
    torch.cuda.synchronize()
    assert len(runner.graphs) == 5 and len(runner.prefill_graphs) == 2 * 6  # (0, 1, 2, 4, 8, 16) x (256, 512)
    assert not (kv.kv[:, :, kv.dummy_page * engine.pool.page_size:] == before[:, :, kv.dummy_page * engine.pool.page_size:]).all()
    written = slots_written_outside_the_dummy_page(kv, before)
    report(check="capture_and_warm_start_pool", graphs=len(runner.graphs) + len(runner.prefill_graphs), slots_written=len(written))
    assert written == []
    runner.out_loc.fill_(0)  # the mutant: a replay with a stale slot where the dummy slot belongs
    runner.graphs[1].replay()
    torch.cuda.synchronize()
    assert slots_written_outside_the_dummy_page(kv, before) == [0]


def scheduled_requests(w) -> list[int]:
    """The request index every block of a planned prefill wrapper's grid reads from its (device) schedule."""
    import minisgl_edu.attention.flashinfer as fi
    torch.cuda.synchronize()
    return fi.prefill_grid(w._plan_info).requests(w._int_workspace_buffer).tolist()


@pytest.mark.parametrize("clean", [True, False])
def test_a_prefill_graph_plan_sends_no_block_outside_the_batch(clean, monkeypatch):
    """A prefill graph's wrapper is planned over page-locked memory as a dead wrapper leaves it (filled with 0x7f, as
    it were another plan's numbers): with clean_schedule every block of the grid, the spare ones too, reads a request
    of the batch. The mutant, no cleaning: the spare blocks read 0x7f7f7f7f, the request index that faulted in session
    41. Planned only, never run: the mutant's kernel would end the CUDA context."""
    import flashinfer
    import minisgl_edu.attention.flashinfer as fi
    from minisgl_edu.graphs import PREFILL_LANES

    class Recycled(flashinfer.BatchPrefillWithPagedKVCacheWrapper):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._pin_memory_int_workspace_buffer.fill_(0x7f)

    monkeypatch.setattr(flashinfer, "BatchPrefillWithPagedKVCacheWrapper", Recycled)
    if not clean:
        monkeypatch.setattr(fi, "clean_schedule", lambda w: w)
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=8192, cuda_graph_max_bs=0,
                                 cuda_graph_max_extend=0))
    backend, tokens = engine.backend, 512
    backend.add_graph_wrapper(0, torch.zeros(PREFILL_LANES * engine.max_seq_len, dtype=torch.int32, device="cuda"),
                              tokens, PREFILL_LANES)
    w = backend.graph_wrappers[0, tokens]
    assert isinstance(w, Recycled)
    batch = Batch([], "prefill", padded_size=0, padded_tokens=tokens)  # a graph's capture step: padding lanes only
    batch.out_loc = torch.zeros(tokens, dtype=torch.int64, device="cuda")  # the plan only reads its dtype
    with torch.inference_mode():
        backend.prepare(batch)
    lens = [1] * (PREFILL_LANES - 1) + [tokens - PREFILL_LANES + 1]  # three one-row lanes, the slack lane the rest
    real = fi.prefill_grid(w._plan_info).real_blocks(lens, backend.q_heads // backend.kv_heads)
    reqs = scheduled_requests(w)
    outside = [r for r in reqs if not 0 <= r < PREFILL_LANES]
    report(check="prefill_graph_schedule", clean=clean, blocks=len(reqs), real_tiles=real, outside=len(outside))
    assert len(reqs) > real  # the grid has spare blocks: what they read is the question
    if clean:
        assert outside == []
    else:
        assert outside  # the mutant is caught


def wrapper_state(w, prefill: bool) -> list[torch.Tensor]:
    """Everything a graph replay reads from a planned wrapper: its plan info, its integer workspace (the planner's
    schedule), its prefix sums, slots and last-page lengths (and a prefill wrapper's query prefix sums and lengths)."""
    torch.cuda.synchronize()
    bufs = [torch.tensor(list(w._plan_info)), w._int_workspace_buffer, w._paged_kv_indptr_buf, w._paged_kv_indices_buf,
            w._paged_kv_last_page_len_buf] + ([w._qo_indptr_buf, w._kv_lens_buffer] if prefill else [])
    return [b.clone() for b in bufs]


def skips_the_prefix_sums(real):
    """The mutant: a lean plan that leaves the wrapper's KV prefix sums as the last plan wrote them."""
    def plan(w, *a, **k):
        saved = w._paged_kv_indptr_buf.clone()
        real(w, *a, **k)
        w._paged_kv_indptr_buf.copy_(saved)
    return plan


@pytest.mark.parametrize("kind", ["decode", "balanced", "mixed"])
def test_lean_plan_leaves_what_plan_leaves(kind, monkeypatch):
    """LEAN_PLAN: a graph's wrapper re-planned by lean_plan holds, bit for bit, the plan info, workspace and buffers
    that FlashInfer's plan() leaves for the same step, each after the same earlier plan (of another step); a lean plan
    that skips the prefix sums is caught by the same comparison."""
    import minisgl_edu.attention.flashinfer as fi
    monkeypatch.setattr(fi, "BALANCED_MIN_BS", 8)
    monkeypatch.setattr(fi, "BALANCED_MIN_KV_BYTES", 0)
    engine = Engine(EngineConfig(model_path=str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True,
                                 max_running_reqs=MAX_BS, max_total_tokens=32768, cuda_graph_max_bs=MAX_BS,
                                 cuda_graph_max_extend=512))
    g = torch.Generator().manual_seed(7)
    lens = {"decode": [300] * 15,  # even contexts: the CUDA-core kernel
            "balanced": [100] * 10 + [1500] * 5, "mixed": [int(n) for n in torch.randint(5, 400, (14,), generator=g)]}[kind]
    reqs = [Req(i, torch.randint(0, 49152, (n,), generator=g).tolist(), SamplingParams(max_tokens=8))
            for i, n in enumerate(lens)]
    for i in range(0, len(reqs), 5):
        prefill(engine, reqs[i:i + 5])

    def make(n_decode: int, prompt: int) -> Batch:  # the first n_decode requests (+ a prompt), its slots taken once
        rows = reqs[:n_decode] + ([new_req(engine, 100 + prompt, prompt, g)] if prompt else [])
        batch = Batch(rows, "prefill" if prompt else "decode", decode_rows=n_decode if prompt else 0)
        batch.out_loc = engine.pool.assign_locations(rows)
        batch.padded_size, batch.padded_tokens = engine.graphs.key(batch)
        return batch

    # this step and another of the same graph (16 decode rows; and 256 prompt rows), of other lengths (16 table rows:
    # 15 requests, or 14 and two prompts)
    (n, p), (n2, p2) = {"decode": ((15, 0), (9, 0)), "balanced": ((15, 0), (14, 0)), "mixed": ((14, 200), (14, 60))}[kind]
    this, other = make(n, p), make(n2, p2)
    states = {}
    for variant, lean in (("plan", False), ("lean", True), ("mutant", True)):
        monkeypatch.setattr(fi, "LEAN_PLAN", False)
        with torch.inference_mode():
            engine.prepare(other)  # the wrappers hold another step's plan first
            monkeypatch.setattr(fi, "LEAN_PLAN", lean)
            if variant == "mutant":
                monkeypatch.setattr(fi, "lean_plan", skips_the_prefix_sums(fi.lean_plan))
            engine.prepare(this)
        md = this.attn_metadata
        assert md.wrapper.is_cuda_graph_enabled and this.padded_size == 16
        assert this.balanced == other.balanced == (kind == "balanced")
        states[variant] = wrapper_state(md.wrapper, prefill=kind == "mixed")
        if kind == "mixed":  # the decode rows' wrapper too (the decode graph's of 16)
            states[variant] += wrapper_state(md.decode, prefill=False)
    same = [torch.equal(a, b) for a, b in zip(states["plan"], states["lean"])]
    report(check="lean_plan_vs_plan", kind=kind, buffers_equal=same)
    assert all(same), same
    assert not all(torch.equal(a, b) for a, b in zip(states["plan"], states["mutant"]))
