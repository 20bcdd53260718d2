"""Chapter 8 exercises — tensor parallelism. Write each function, then grade it:

    python -m minisgl_edu.exercises check 08

`column_load` and `row_load` replace `ColumnParallelLinear._load` and `RowParallelLinear._load`
(model/layers.py: the function every parameter calls to pick this rank's shard out of a checkpoint
tensor); `receive` replaces `minisgl_edu.tp.receive`. The grader rebuilds sharded layers for every
rank of tp = 2, 3, 4 and checks that the ranks together compute the unsharded layer, simulates
ranks (threads) whose inboxes lag behind rank 0's, then runs the real engine at tp=2 (two processes,
your code in both) against the tp=1 tokens.
"""
from __future__ import annotations

import queue

from minisgl_edu import tp  # tp.get_tp_info() is this rank; tp.broadcast_count(n) is rank 0's n everywhere
from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)


def column_load(self, param, sl, part: int = 0) -> None:
    """ColumnParallelLinear._load: copy this rank's rows of checkpoint tensor `sl` (a weight [out, in] or a
    bias [out]; index it like a tensor, sl[a:b]) into `param`, this rank's shard.

    A column-parallel layer splits W's *output rows*: y_r = x W_r^T, and the ranks' outputs side by
    side are the full output. One layer may merge several checkpoint matrices (q|k|v, gate|up):
    self.parts[part] = (rows of that matrix, rows this rank keeps, first row this rank keeps), and
    that part's rows sit in param from row self.offsets[part] on (param.narrow(0, offset, n))."""
    raise NotAttempted  # your code here


def row_load(self, param, sl, part=None) -> None:
    """RowParallelLinear._load: copy this rank's columns of the checkpoint weight `sl` ([out, in]) into
    `param` ([out, in / tp]).

    A row-parallel layer splits W's *input columns*: rank r computes x_r W_r^T from its slice of the
    input, and an all-reduce sums the partial results. This rank's columns start at self.start."""
    raise NotAttempted  # your code here


def receive(inbox, block: bool, use_count: bool = True, wait=None) -> list:
    """tp.receive: this step's messages, the same on every rank.

    Every rank has its own copy of the message stream (`inbox`: get_nowait() raises queue.Empty when
    nothing is there yet); the other ranks' copies may lag behind rank 0's. `wait(inbox)` is the
    blocking get (default: inbox.get()). block=True: the engine is idle, so first wait for one
    message. Then rank 0 (tp.get_tp_info().is_primary) takes everything already there, and tells
    every rank how many with tp.broadcast_count(n) (every rank calls it once; the others pass any
    number and get rank 0's); the other ranks then take exactly that many, waiting for late ones.
    use_count=False: every rank takes what it has (chapter 8's counter-example: no broadcast)."""
    raise NotAttempted  # your code here
