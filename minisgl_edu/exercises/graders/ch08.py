"""Chapter 8: sharded linear layers (every rank rebuilt in this process), rank 0's receive (ranks as threads),
then the real engine at tp=2 (two processes with your code) against tp=1."""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from hypothesis import strategies as st

from .. import Wrong
from ..oracle import Case, compare
from ..swap import ENV, env_value
from . import call, prop

TP_CASE = Case(1, 32, 1024, 8, tp=2)


_RUNS: dict = {}  # (file, mtime, exercise ids) -> None (same tokens) or the Wrong message: one tp=2 run per chapter


def _run_tp(exercises, path) -> str | None:
    """tp=2 through LLM's rank processes: $MINISGL_EXERCISES makes each child apply your functions at import."""
    old = os.environ.get(ENV)
    os.environ[ENV] = env_value({e.id: path for e in exercises})
    try:
        compare(TP_CASE, " and ".join(e.name for e in exercises), reference_case=Case(1, 32, 1024, 8))
    except Wrong as w:
        return str(w)
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
    return None


def _tp_engine(ex, path, module) -> None:
    """The engine stage, shared by the chapter's exercises: one tp=2 run with every exercise of this file that
    is attempted and passes its own property tests (alone again only to tell which one broke the tokens)."""
    from ..registry import build_exercises
    from ..swap import is_stub
    others = [e for e in build_exercises(8) if e.id != ex.id
              and all(getattr(module, f, None) is not None and not is_stub(getattr(module, f)) for f in e.funcs)
              and _properties_pass(e, module)]
    stamp = (os.path.abspath(path), os.path.getmtime(path))
    group = tuple(sorted([ex] + others, key=lambda e: e.id))
    key = stamp + tuple(e.id for e in group)
    if key not in _RUNS:
        _RUNS[key] = _run_tp(group, path)
    if _RUNS[key] is not None and len(group) > 1:
        key = stamp + (ex.id,)
        if key not in _RUNS:
            _RUNS[key] = _run_tp((ex,), path)
    if _RUNS[key] is not None:
        raise Wrong(_RUNS[key])


def _properties_pass(ex, module) -> bool:
    try:
        (_linear_properties if ex.name == "linear_shards" else _receive_properties)(ex, module)
        return True
    except Exception:
        return False


# ---- column / row-parallel layers ------------------------------------------------------------------------------
def grade_linear_shards(ex, path, module) -> None:
    _linear_properties(ex, module)
    _tp_engine(ex, path, module)


def _linear_properties(ex, module) -> None:
    import torch
    import torch.nn.functional as F

    from ...model.layers import ColumnParallelLinear, RowParallelLinear
    from ...tp import set_tp_info
    gen = torch.Generator().manual_seed(0)
    W, b = torch.randn(12, 6, generator=gen), torch.randn(12, generator=gen)
    Wq, Wk, Wv = torch.randn(12, 6, generator=gen), torch.randn(6, 6, generator=gen), torch.randn(6, 6, generator=gen)
    R = torch.randn(6, 12, generator=gen)
    x, xr = torch.randn(3, 6, generator=gen), torch.randn(3, 12, generator=gen)
    with _installed(ex, module):
        for size in (2, 3, 6):
            col, merged, row = [], [], []
            try:
                for r in range(size):
                    set_tp_info(r, size)
                    c = ColumnParallelLinear.simple(6, 12, bias=True)
                    call("column_load", c.weight.load, c.weight.data, W, on=f"rank {r} of tp={size}")
                    call("column_load", c.bias.load, c.bias.data, b, on=f"rank {r} of tp={size} (the bias)")
                    n = 12 // size
                    if not torch.equal(c.weight.data, W[r * n:(r + 1) * n]):
                        raise Wrong(f"at tp={size}, rank {r}'s column-parallel shard of a 12x6 weight is not output "
                                    f"rows {r * n}..{(r + 1) * n - 1} of W")
                    col.append(F.linear(x, c.weight, c.bias))
                    kv = 6 // size
                    m = ColumnParallelLinear(6, [(12, n, r * n), (6, kv, r * kv), (6, kv, r * kv)])
                    for i, part in enumerate((Wq, Wk, Wv)):
                        call("column_load", m.weight.load, m.weight.data, part, i, on=f"part {i} (q|k|v) on rank {r} of tp={size}")
                    merged.append(F.linear(x, m.weight))
                    w = RowParallelLinear(12, 6)
                    call("row_load", w.weight.load, w.weight.data, R, on=f"rank {r} of tp={size}")
                    if not torch.equal(w.weight.data, R[:, r * n:(r + 1) * n]):
                        raise Wrong(f"at tp={size}, rank {r}'s row-parallel shard of a 6x12 weight is not input "
                                    f"columns {r * n}..{(r + 1) * n - 1} of W")
                    row.append(F.linear(xr[:, r * n:(r + 1) * n], w.weight))
            finally:
                set_tp_info(0, 1)
            if not torch.allclose(torch.cat(col, -1), F.linear(x, W, b), atol=1e-5):
                raise Wrong(f"at tp={size}, the column-parallel ranks' outputs side by side differ from the unsharded layer's")
            n, kv = 12 // size, 6 // size
            parts = [torch.cat([o[:, off:off + k] for o in merged], -1) for off, k in ((0, n), (n, kv), (n + kv, kv))]
            if not torch.allclose(torch.cat(parts, -1), F.linear(x, torch.cat([Wq, Wk, Wv])), atol=1e-5):
                raise Wrong(f"at tp={size}, a merged q|k|v layer (parts of 12, 6, 6 rows): the ranks' q, k and v "
                            f"pieces do not make up the unsharded output (each part sits at self.offsets[part])")
            if not torch.allclose(sum(row), F.linear(xr, R), atol=1e-4):
                raise Wrong(f"at tp={size}, the row-parallel ranks' partial outputs do not sum to the unsharded layer's")


@contextmanager
def _installed(ex, module):
    from ..swap import replacements
    saved = []
    for owner, attr, new in replacements(ex, module):
        saved.append((owner, attr, owner.__dict__[attr]))
        setattr(owner, attr, new)
    try:
        yield
    finally:
        for owner, attr, old in saved:
            setattr(owner, attr, old)


# ---- receive: ranks as threads, rank 0's inbox ahead of the others ------------------------------------------------
@contextmanager
def _fake_ranks(size: int):
    """tp.get_tp_info / tp.broadcast_count for `size` threads (each thread sets local.rank)."""
    from ... import tp
    local, box = threading.local(), {}
    barrier = threading.Barrier(size, timeout=5)
    get_info, bcast = tp.get_tp_info, tp.broadcast_count

    def broadcast_count(n: int) -> int:
        if local.rank == 0:
            box["n"] = n
        barrier.wait()
        out = box["n"]
        barrier.wait()  # nobody overwrites the box before everyone has read it
        return out

    tp.get_tp_info = lambda: tp.DistributedInfo(local.rank, size)
    tp.broadcast_count = broadcast_count
    try:
        yield local
    finally:
        tp.get_tp_info, tp.broadcast_count = get_info, bcast


WAIT_S = 2  # how long a fake inbox waits for a message before the grader calls it lost


class _Lost(Exception):
    pass


class _Inbox:
    """One rank's fake end of the wires (the interface of server/scheduler_proc.RankIO). Rank 0's mailbox
    holds what was sent to it; in a `block` round the round's messages arrive only while it waits
    (take(True)). A rank > 0 gets only what rank 0 forwards: of each forward, the first `have` messages
    are there at once (take), the rest are on their way (next() waits for them)."""

    def __init__(self, rank: int, sim: "_Sim"):
        self.rank, self.sim = rank, sim
        self.arrived: list[bytes] = []  # take() returns these
        self.on_way: list[bytes] = []  # only next() (or a blocking wait) gets these
        self.have = 0  # this round: how many of a forward arrive at once

    def take(self, block: bool) -> list[bytes]:
        with self.sim.cond:
            if block and not self.arrived and self.on_way:  # the wait of an idle rank: the mail comes in
                self.arrived, self.on_way = self.arrived + self.on_way[:1], self.on_way[1:]
                if self.rank == 0:  # rank 0's mailbox: a round's messages come together
                    self.arrived, self.on_way = self.arrived + self.on_way, []
            out, self.arrived = self.arrived, []
            return out

    def forward(self, raws: list[bytes]) -> None:
        if self.rank != 0:
            return  # as on a real rank > 0: it has no wires to the others
        with self.sim.cond:
            self.sim.forwards.append(list(raws))
            for box in self.sim.inboxes[1:]:
                box.arrived += list(raws[:box.have])
                box.on_way += list(raws[box.have:])
            self.sim.cond.notify_all()

    def next(self) -> bytes:
        if self.rank == 0:
            raise _Lost("rank 0 called inbox.next(): rank 0 takes its mailbox with inbox.take(block); next() is "
                        "for ranks 1.., which read what rank 0 forwards")
        with self.sim.cond:
            if not self.sim.cond.wait_for(lambda: self.arrived or self.on_way, WAIT_S):
                raise _Lost(f"rank {self.rank} waited {WAIT_S} s in inbox.next() for a message rank 0 never "
                            f"forwarded (rank 0 calls inbox.forward with what it took)")
            src = self.arrived if self.arrived else self.on_way
            return src.pop(0)


class _Sim:
    def __init__(self, size: int):
        self.cond = threading.Condition()
        self.inboxes = [_Inbox(r, self) for r in range(size)]
        self.forwards: list[list[bytes]] = []


def _simulate(receive, size: int, rounds) -> tuple[list, list]:
    """rounds: (block, new messages, how many of rank 0's forward each rank > 0 has at once). Returns (per round:
    the messages sent to rank 0, per round: what each rank's receive returned, or the first error)."""
    sim = _Sim(size)
    published, results, seq = [], [], 0
    with _fake_ranks(size) as local:
        for block, new, have in rounds:
            msgs = [f"m{seq + i}".encode() for i in range(new)]
            seq += new
            published.append(msgs)
            rank0 = sim.inboxes[0]
            with sim.cond:
                rank0.arrived, rank0.on_way = (rank0.arrived, rank0.on_way + msgs) if block else \
                    (rank0.arrived + rank0.on_way + msgs, [])
                for box, h in zip(sim.inboxes[1:], have):
                    box.have = h
            out, errors = [None] * size, []

            def rank_main(r):
                local.rank = r
                try:
                    out[r] = receive(sim.inboxes[r], block, True)
                except threading.BrokenBarrierError:
                    errors.append("the ranks never all met in tp.broadcast_count (each rank calls it once per receive)")
                except _Lost as e:
                    errors.append(str(e))
                except Exception as e:
                    errors.append(f"rank {r}: {type(e).__name__}: {e}")

            threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(3 * WAIT_S + 6)
            left = [(b.rank, len(b.arrived) + len(b.on_way)) for b in sim.inboxes[1:] if b.arrived or b.on_way]
            if not errors and left and all(o == msgs for o in out):  # (a wrong result is the better message)
                r, k = left[0]
                errors.append(f"rank {r} was left {k} forwarded message(s) it did not read: rank 0 forwarded more than "
                              f"the count it broadcast (forward once, exactly what it took)")
            if errors:
                return published, results + [errors[0]]
            results.append(out)
    return published, results


rounds_st = st.tuples(st.integers(2, 3), st.lists(st.tuples(st.booleans(), st.integers(0, 3),
                                                            st.lists(st.integers(0, 3), min_size=2, max_size=2)),
                                                  min_size=1, max_size=4))


def grade_receive(ex, path, module) -> None:
    _receive_properties(ex, module)
    _tp_engine(ex, path, module)


def _receive_properties(ex, module) -> None:
    def check(x):
        size, spec = x
        rounds = [(block, max(new, 1) if block else new, have) for block, new, have in spec]
        published, results = _simulate(module.receive, size, rounds)
        desc = f"tp={size}, rounds (block, messages, how many of rank 0's forward ranks 1.. get at once) {rounds}"
        for k, got in enumerate(results):
            if isinstance(got, str):
                raise Wrong(f"{desc}: in round {k}, {got}")
            want = published[k]
            for r, msgs in enumerate(got):
                if msgs != want:
                    lag = "" if r == 0 else (" (what rank 0 forwards reaches it late: read exactly rank 0's count with "
                                             "inbox.next(), which waits)")
                    raise Wrong(f"{desc}: in round {k} rank {r} received {msgs}; every rank must receive {want}{lag}")

    prop(rounds_st, check, 25, explicit=((2, [(False, 2, [0, 0])]), (2, [(True, 1, [0, 0])])))
