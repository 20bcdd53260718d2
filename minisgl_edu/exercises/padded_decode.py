"""Chapter 7's grading adapter: your `kernel_args` where both attention backends call it
(`AttentionBackend.prepare`, attention/base.py), with the CPU's decode steps padded as a GPU's are.

On a CPU the engine captures no CUDA graphs, so `batch.padded_size` is 0 and the reference backend
never sees a padding lane. To grade your padding inside the engine anyway, every decode-shaped step
(each request one new token) of at most MAX_BS requests asks your function for the lanes of the
captured size (`graphs.capture_sizes`, `graphs.pad_to`): the padding lanes must be there and read
only the dummy page. The reference backend then attends over your real lanes (it plans no padding
lanes on the CPU), so wrong arguments still give wrong tokens.
"""
from __future__ import annotations

from dataclasses import replace

from . import Wrong

MAX_BS = 8  # the captured sizes 1, 2, 4, 8: the graders' batches fit


def install(fn, original):
    """Adapter for the ch07 exercise: what `attention.base.kernel_args` becomes while `fn` is graded."""
    from ..graphs import capture_sizes, pad_to

    def kernel_args(reqs, pool, padded_size: int = 0, padded_tokens: int = 0):
        bs = len(reqs)
        if padded_size or padded_tokens or not 0 < bs <= MAX_BS or any(r.extend_len != 1 for r in reqs):
            return fn(reqs, pool, padded_size, padded_tokens)
        padded = pad_to(capture_sizes(MAX_BS), bs)
        args = fn(reqs, pool, padded)
        _check_padding(args, pool, bs, padded)
        k = int(args.cu_seqlens_k[bs])
        return replace(args, cu_seqlens_q=args.cu_seqlens_q[:bs + 1], cu_seqlens_k=args.cu_seqlens_k[:bs + 1],
                       seq_lens_k=args.seq_lens_k[:bs], kv_indices=args.kv_indices[:k],
                       last_page_len=args.last_page_len[:bs], num_padding=0)
    kernel_args.__doc__ = original.__doc__
    return kernel_args


def _check_padding(args, pool, bs: int, padded: int) -> None:
    lanes = f"a decode batch of {bs} padded to {padded}"
    if len(args.cu_seqlens_q) != padded + 1 or len(args.cu_seqlens_k) != padded + 1:
        raise Wrong(f"{lanes}: your kernel_args gave {len(args.cu_seqlens_q) - 1} query lanes and "
                    f"{len(args.cu_seqlens_k) - 1} key lanes; there are {padded}")
    dummy = pool.num_pages * pool.page_size  # the first slot of the dummy page
    cu_k = args.cu_seqlens_k.tolist()
    for lane in range(bs, padded):
        slots = args.kv_indices[cu_k[lane]: cu_k[lane + 1]].tolist()
        if not slots or min(slots) < dummy:
            raise Wrong(f"{lanes}: padding lane {lane} reads slots {slots}, not the dummy page (slots from "
                        f"{dummy}): it would touch a real request's KV")
