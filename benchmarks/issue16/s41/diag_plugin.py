"""Session 41's probe (PYTHONPATH=benchmarks/issue16/s41 pytest -p diag_plugin): after every FlashInfer plan of a prefill step
outside a capture, wait for the device and check what the prefill wrapper will
read against the step's KernelArgs: prefix sums, key lengths, slots within the pool. Prints one line a plan that
differs, and the first plans of every GraphRunner in full."""
import sys

import torch

import minisgl_edu.attention.flashinfer as fi

_real = fi.FlashInferBackend.prepare
seen = {"n": 0}


def out(*a):
    print("DIAG", *a, file=sys.stderr, flush=True)


def check(name, w, args, slots, prefill, verbose):
    torch.cuda.synchronize()
    n = int(args.cu_seqlens_k[-1])
    got = {"kv_indptr": w._paged_kv_indptr_buf.cpu().tolist(), "want_kv_indptr": args.cu_seqlens_k.tolist()}
    idx = w._paged_kv_indices_buf[:n]
    bad = []
    if got["kv_indptr"] != got["want_kv_indptr"]:
        bad.append("kv_indptr")
    if not torch.equal(idx, args.kv_indices.to(idx.device)):
        bad.append("indices!=args")
    lo, hi = (int(idx.min()), int(idx.max())) if n else (0, 0)
    if lo < 0 or hi >= slots:
        bad.append(f"indices out of [0,{slots}): {lo}..{hi}")
    if prefill:
        q = w._qo_indptr_buf.cpu().tolist()
        kl = w._kv_lens_buffer.cpu().tolist()
        if q != args.cu_seqlens_q.tolist():
            bad.append(f"qo_indptr {q} want {args.cu_seqlens_q.tolist()}")
        if kl[:len(args.seq_lens_k)] != args.seq_lens_k.tolist():
            bad.append(f"kv_lens {kl} want {args.seq_lens_k.tolist()}")
        got["max_rows"] = w._max_total_num_rows
    if bad or verbose:
        out(name, "BAD" if bad else "ok", bad, "n", n, "plan_info", list(w._plan_info), got)


def prepare(self, batch):
    _real(self, batch)
    if torch.cuda.is_current_stream_capturing() or not batch.is_prefill:
        return
    md = batch.attn_metadata
    seen["n"] += 1
    verbose = not batch.reqs and batch.padded_tokens == 512 and batch.padded_size == 16  # each runner's first capture
    slots = self.kv.k.shape[1]
    check(f"#{seen['n']} prefill pbs={batch.padded_size} pt={batch.padded_tokens} reqs={len(batch.reqs)}",
          md.wrapper, md.args, slots, True, verbose)


fi.FlashInferBackend.prepare = prepare
