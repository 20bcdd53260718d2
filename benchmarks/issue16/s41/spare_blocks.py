"""Session 41's lead, for a GPU call: what a prefill graph's spare blocks cost.

    python benchmarks/issue16/s41/spare_blocks.py [--model benchmarks/configs/qwen3-0.6b] [--reps 50]

A prefill graph's grid is sized for the most query tiles its rows could make; FlashInfer's plan gives the real
tiles their (request, tile) and leaves the spare blocks' entries as the wrapper's page-locked buffer held them:
zeros (clean_schedule), or this wrapper's earlier entries. A spare block then computes request 0's first tile, or
an old entry's tile, again. For a new prompt that is cheap (causal: few keys), behind a long cached prefix it reads
every key. The twin points the spare blocks at the slack lane's first tile (a new lane of its own: few keys) on the
GPU after each plan. For each shape, one prefill-graph replay timed over --reps replays either way (CUDA events), and
the real rows' hidden states compared bit for bit. Written in session 41; run in session 42 (H100, RESULTS.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from minisgl_edu.engine import Engine, EngineConfig  # noqa: E402
from minisgl_edu.attention.flashinfer import prefill_grid  # noqa: E402
from minisgl_edu.graphs import PREFILL_LANES  # noqa: E402
from minisgl_edu.req import Batch, Req, SamplingParams  # noqa: E402


def new_req(engine, uid: int, n: int, g) -> Req:
    r = Req(uid, torch.randint(0, engine.vocab_size, (n,), generator=g).tolist(), SamplingParams(max_tokens=8))
    r.table_idx = engine.pool.take_row()
    engine.pool.token_pool[r.table_idx, :n] = torch.tensor(r.token_ids, dtype=torch.int32)
    return r


def extend(engine, r: Req, upto: int) -> None:
    """Eager steps of at most 2048 tokens until r's cached prefix reaches `upto`."""
    while r.cached_len < upto:
        r.device_len = min(upto, r.cached_len + 2048)
        batch = Batch([r], "prefill")
        batch.out_loc = engine.pool.assign_locations([r])
        engine.forward(batch)
        r.cached_len = r.device_len


def cheap_spares(md, group: int) -> int:
    """After a step's plan (md: its attention metadata): the spare blocks' (request, query tile) set to (the slack
    lane, 0) on the GPU. Returns the number of spare blocks (the grid read by attention/flashinfer.py's prefill_grid)."""
    grid = prefill_grid(md.wrapper._plan_info)
    lens = (md.args.cu_seqlens_q[1:] - md.args.cu_seqlens_q[:-1]).tolist()  # each lane's query rows
    real, ws = grid.real_blocks(lens, group), md.wrapper._int_workspace_buffer
    grid.requests(ws)[real:].fill_(PREFILL_LANES - 1)
    grid.tiles(ws)[real:].fill_(0)
    return grid.blocks - real


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "benchmarks/configs/qwen3-0.6b"))
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    engine = Engine(EngineConfig(model_path=args.model, device="cuda", dummy_weights=True, max_running_reqs=16,
                                 max_total_tokens=40000, cuda_graph_max_bs=16, cuda_graph_max_extend=512))
    backend, runner = engine.backend, engine.graphs
    group = backend.q_heads // backend.kv_heads
    g = torch.Generator().manual_seed(0)
    print(f"{Path(args.model).name}: {torch.cuda.get_device_name()}, {args.reps} replays each")
    for prefix in (0, 4000, 16000):
        r = new_req(engine, prefix, prefix + 500, g)
        extend(engine, r, prefix)
        r.device_len = prefix + 500  # this step: 500 rows after the cached prefix
        batch = Batch([r], "prefill")
        batch.out_loc = engine.pool.assign_locations([r])
        batch.padded_size, batch.padded_tokens = runner.prefill_key(batch)
        out, ms = {}, {}
        for variant in ("as planned", "cheap spares"):
            with torch.inference_mode():
                engine.prepare(batch)
                spares = cheap_spares(batch.attn_metadata, group) if variant == "cheap spares" else None
                runner.replay_prefill(batch)  # once untimed
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(args.reps):
                    h = runner.replay_prefill(batch)
                end.record()
                torch.cuda.synchronize()
            out[variant], ms[variant] = h.clone(), start.elapsed_time(end) / args.reps
        same = torch.equal(out["as planned"], out["cheap spares"])
        print(f"prefix {prefix:>6} + 500 rows, graph {batch.padded_tokens}: step {ms['as planned']:.3f} ms as planned, "
              f"{ms['cheap spares']:.3f} ms with {spares} spare blocks a KV head on the slack lane; hidden equal: {same}")


if __name__ == "__main__":
    main()
