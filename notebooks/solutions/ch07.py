"""Solutions to the exercises of notebook 07 (kernel arguments and CUDA graphs)."""
from __future__ import annotations

import numpy as np


def cu_seqlens_k(device_lens: list[int]) -> list[int]:
    """Prefix sums of device_len, starting at 0: request i's keys are kv_indices[cu[i]:cu[i+1]]."""
    return [0] + np.cumsum(device_lens).tolist()


def padded_size(bs: int, max_bs: int) -> int:
    """1, 2, 4, 8, then multiples of 16: the smallest captured size >= bs."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_bs] + list(range(16, max_bs + 1, 16))
    return min(s for s in sorted(set(sizes + [max_bs])) if s >= bs)
