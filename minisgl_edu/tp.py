"""Chapter 8 — TP: one ledger, many ranks. How do N ranks, each deciding on its own, reach the same
decision every step?

Rank 0 broadcasts the message count and forwards the raw bytes (`receive`); only the weights are
split (`all_reduce` / `all_gather_last_dim`). With `size == 1` every helper is the identity.
"""
from __future__ import annotations

import datetime
import os
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


# ---- the data plane: what the sharded layers call --------------------------------------------------
def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum the partial results of every rank, in place (after a row-parallel layer)."""
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


# ---- process groups --------------------------------------------------------------------------------
_CPU_GROUP = None


def init_distributed(rank: int, size: int, device: torch.device | str, init_method: str,
                     timeout_s: float = 600.0) -> None:
    """Join the TP group: NCCL on CUDA (+ a gloo group for host-side control), gloo on the CPU, through a
    `file://` `init_method` (no TCP port for other hosts). A collective waiting over `timeout_s` raises."""
    global _CPU_GROUP
    set_tp_info(rank, size)
    if size == 1:
        return
    device = torch.device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    if os.path.exists("/sys/class/net/lo"):  # one host: gloo's sockets listen on loopback only
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if device.type == "cuda":
        # NVLink multicast (NVLS) can take a host's shared GPUs out of service: keep it off
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size, timeout=timeout)
    _CPU_GROUP = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else dist.group.WORLD


def cpu_group():
    """The group for host-side control messages (message counts, barriers)."""
    return _CPU_GROUP


# ---- the control plane: host-side agreement ------------------------------------------------------
def broadcast_count(n: int) -> int:
    """Rank 0's `n` on every rank (the others pass anything). Over the gloo CPU group: no GPU sync."""
    if _TP.size == 1:
        return n
    t = torch.tensor([n if _TP.is_primary else 0], dtype=torch.int64)
    dist.broadcast(t, src=0, group=_CPU_GROUP)
    return int(t.item())


def min_over_ranks(n: int) -> int:
    """The smallest `n` of all ranks: e.g. KV pool size, so every rank has the same number of pages."""
    if _TP.size == 1:
        return n
    t = torch.tensor([n], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=_CPU_GROUP)
    return int(t.item())


def receive(inbox, block: bool, use_count: bool = True) -> list[bytes]:
    """This step's messages (raw bytes), the same on every rank. `inbox` (`server/scheduler_proc.RankInbox`):
    `take(block)` what has arrived, `forward(raws)` rank 0's bytes to the others, `next()` one forwarded
    message. `use_count=False`: every rank takes whatever *it* has seen (chapter 8's counter-example)."""
    raws = inbox.take(block) if _TP.is_primary or not use_count else []
    if use_count:
        n = broadcast_count(len(raws))  # rank 0's count, on every rank
        while len(raws) < n:  # forwarded by rank 0 just below: on their way
            raws.append(inbox.next())
    if _TP.is_primary:
        inbox.forward(raws)  # as received: never decoded and re-encoded
    return raws
