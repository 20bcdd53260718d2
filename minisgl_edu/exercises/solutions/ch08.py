"""Chapter 8 exercises — tensor parallelism. Write each function, then grade it:

    python -m minisgl_edu.exercises check 08

`column_load` and `row_load` replace `ColumnParallelLinear._load` and `RowParallelLinear._load`
(model/layers.py: the function every parameter calls to pick this rank's shard out of a checkpoint
tensor); `receive` replaces `minisgl_edu.tp.receive`, which every scheduler rank's loop calls
(server/scheduler_proc.py, behind both `serve --tp N` and `LLM(tp=N)`). The grader rebuilds sharded
layers for every rank of tp = 2, 3, 6 and checks that the ranks together compute the unsharded
layer, simulates ranks (threads) with fake inboxes whose forwarded messages lag behind rank 0's,
then runs the real engine at tp=2 (two processes, your code in both) against the tp=1 tokens.
"""
from __future__ import annotations

from minisgl_edu import tp  # tp.get_tp_info() is this rank; tp.broadcast_count(n) is rank 0's n everywhere
from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)


def column_load(self, param, sl, part: int = 0) -> None:
    """ColumnParallelLinear._load: copy this rank's rows of checkpoint tensor `sl` (a weight [out, in] or a
    bias [out]; index it like a tensor, sl[a:b]) into `param`, this rank's shard.

    A column-parallel layer splits W's *output rows*: y_r = x W_r^T, and the ranks' outputs side by
    side are the full output. One layer may merge several checkpoint matrices (q|k|v, gate|up):
    self.parts[part] = (rows of that matrix, rows this rank keeps, first row this rank keeps), and
    that part's rows sit in param from row self.offsets[part] on (param.narrow(0, offset, n))."""
    _, n, start = self.parts[part]
    param.narrow(0, self.offsets[part], n).copy_(sl[start:start + n])


def row_load(self, param, sl, part=None) -> None:
    """RowParallelLinear._load: copy this rank's columns of the checkpoint weight `sl` ([out, in]) into
    `param` ([out, in / tp]).

    A row-parallel layer splits W's *input columns*: rank r computes x_r W_r^T from its slice of the
    input, and an all-reduce sums the partial results. This rank's columns start at self.start."""
    param.copy_(sl[:, self.start:self.start + param.shape[1]])


def receive(inbox, block: bool, use_count: bool = True) -> list[bytes]:
    """This step's messages (raw bytes), the same on every rank.

    `inbox` is this rank's end of the wires (server/scheduler_proc.RankIO); three calls:
      inbox.take(block) -> list[bytes]: what has arrived (block=True: the engine is idle, so first
          wait a little for one message; on rank 0 this is the mailbox everybody sends to);
      inbox.forward(raws): rank 0 re-publishes these bytes, unchanged, to ranks 1..N-1;
      inbox.next() -> bytes: on ranks 1..N-1, the next message rank 0 forwarded (waits for it).
    Rank 0 (tp.get_tp_info().is_primary) takes what arrived and tells every rank how many with
    tp.broadcast_count(n) (every rank calls it once; the others pass any number and get rank 0's);
    the other ranks then read exactly that many forwarded messages, however late they come, and
    rank 0 forwards what it took. use_count=False: every rank takes what *it* has seen (chapter 8's
    counter-example: no broadcast, and rank 0 forwards what it took all the same)."""
    primary = tp.get_tp_info().is_primary
    raws = inbox.take(block) if primary or not use_count else []
    if use_count:
        n = tp.broadcast_count(len(raws))
        while len(raws) < n:  # rank 0 forwards them just below: they are on their way
            raws.append(inbox.next())
    if primary:
        inbox.forward(raws)  # the bytes as received: never decoded and encoded again
    return raws
