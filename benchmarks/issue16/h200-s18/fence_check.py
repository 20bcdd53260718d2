"""Session 18: p1b's illegal access (calls 1 and 3, never under CUDA_LAUNCH_BLOCKING). FlashInfer's plan writes its
schedule into one page-locked buffer per wrapper and queues the copy; bench.make_decode_batch prefilled 93 prompts
in groups of 6 and a last group of 3 through the one eager prefill wrapper without waiting, so the host planned the
last group before the GPU had copied the first groups' plans. Modes (one process each, since a fault ends a CUDA
context): `sync` waits after every group (the truth); `on` = PLAN_FENCE (the fix); `off` = neither (the bug).
Prints each group's first tokens' checksum; `on` must equal `sync`."""
import hashlib
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../.."))
sys.path.insert(0, ROOT)
import minisgl_edu.attention.flashinfer as fib  # noqa: E402
from minisgl_edu import LLM, SamplingParams  # noqa: E402
from minisgl_edu.req import Batch, Req  # noqa: E402

mode = sys.argv[1]
fib.PLAN_FENCE = mode == "on"
llm = LLM(os.path.join(ROOT, "benchmarks/configs/qwen3-0.6b"), device="cuda", dummy_weights=True, max_running_reqs=128,
          cuda_graph_max_bs=0, max_total_tokens=200_000)
eng, pool = llm.engine, llm.engine.pool
g = torch.Generator().manual_seed(93)
reqs = []
for i in range(93):
    r = Req(10_000 + i, torch.randint(0, 10000, (1203,), generator=g).tolist(), SamplingParams(max_tokens=4))
    r.table_idx, r.device_len = pool.take_row(), 1203
    pool.token_pool[r.table_idx, :1203] = torch.tensor(r.token_ids, dtype=torch.int32)
    reqs.append(r)
toks = []
for i in range(0, 93, 6):
    b = Batch(reqs[i:i + 6], "prefill")
    b.out_loc = pool.assign_locations(b.reqs)
    toks.append(eng.forward(b))
    if mode == "sync":
        torch.cuda.synchronize()
out = torch.cat(toks).tolist()
print(f"{mode}: {len(out)} first tokens, checksum {hashlib.sha1(str(out).encode()).hexdigest()[:12]}, first 8 {out[:8]}",
      flush=True)
