"""Chapter 8 — TP: one ledger, many ranks. Which rank am I, and how do shards meet again?

Every rank runs the same scheduler on the same messages, so every rank forms the same batch; only
the weights are split. This module holds the rank identity and the two collectives the sharded
layers need (all-reduce after a row-parallel layer, all-gather of vocab-sharded logits).
With `size == 1` every helper is the identity, so the single-GPU path pays nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedInfo:
    rank: int = 0
    size: int = 1

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


_TP = DistributedInfo()


def set_tp_info(rank: int, size: int) -> None:
    global _TP
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} outside tp size {size}")
    _TP = DistributedInfo(rank, size)


def get_tp_info() -> DistributedInfo:
    return _TP


def shard_range(total: int, info: DistributedInfo | None = None) -> tuple[int, int]:
    """The [start, end) slice of `total` items that this rank owns (total must divide evenly)."""
    info = info or _TP
    if total % info.size:
        raise ValueError(f"{total} does not divide by tp size {info.size}")
    n = total // info.size
    return info.rank * n, (info.rank + 1) * n


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    if _TP.size > 1:
        dist.all_reduce(x)
    return x


def all_gather_last_dim(x: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's shard along the last dimension (vocab-parallel logits)."""
    if _TP.size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(_TP.size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=-1)


_CPU_GROUP = None


def init_distributed(rank: int, size: int, device: torch.device | str, init_method: str) -> None:
    """Join the TP group: NCCL for tensors on CUDA (+ a gloo group for CPU-side control), gloo on CPU.
    `init_method` is a `file://` path in a private temp dir (no TCP port is opened to other hosts)."""
    global _CPU_GROUP
    set_tp_info(rank, size)
    if size == 1:
        return
    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size)
    _CPU_GROUP = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD


def cpu_group():
    """The group for host-side control messages (message counts, barriers)."""
    return _CPU_GROUP
