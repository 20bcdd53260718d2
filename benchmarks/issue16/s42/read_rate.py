"""Session 42: is the copy rate (P1's and P2's floor) the card's read limit? Decode attention only reads its K/V.
On the H200 the decode kernel reads at ~93 % of the copy rate at 256 requests (session 33); if a plain read-only
kernel goes faster than the copy, the floor is loose there and a faster attention kernel could exist.

    python benchmarks/issue16/s42/read_rate.py

Prints the copy rate as bench.copy_bandwidth measures it (bytes read + written) and two read-only reductions over the
same 2 GiB (bytes read), each the best of 3 rounds of 10, all timed by bench.time_steps. (Session 42's H100 figures
came from the first version, `f6201aa`, which timed the reads with CUDA events instead.)
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from minisgl_edu.bench import copy_bandwidth, time_steps  # noqa: E402


def read_rate(fn, x: torch.Tensor, iters: int = 10) -> float:
    """Bytes read per second by fn(x), timed as copy_bandwidth times the copy (so the two rates compare)."""
    return x.numel() * x.element_size() / time_steps(lambda: fn(x), iters, warmup=1)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    copy = max(copy_bandwidth() for _ in range(3))
    x = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda").normal_()
    rates = {"copy (read + write)": copy,
             "sum, bf16 -> float32 (read)": max(read_rate(lambda t: t.sum(dtype=torch.float32), x) for _ in range(3)),
             "amax, bf16 (read)": max(read_rate(torch.amax, x) for _ in range(3))}
    for name, r in rates.items():
        print(f"{name:>30}: {r / 1e12:.3f} TB/s = {r / copy:.3f} x the copy rate")
