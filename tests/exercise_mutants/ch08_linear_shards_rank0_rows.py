"""column_load where every rank takes rank 0's rows.

EXPECT: column-parallel shard
"""
from __future__ import annotations

import queue

from minisgl_edu import tp


def column_load(self, param, sl, part: int = 0) -> None:
    """ColumnParallelLinear._load: copy this rank's rows of checkpoint tensor `sl` (a weight [out, in] or a
    bias [out]; index it like a tensor, sl[a:b]) into `param`, this rank's shard.

    A column-parallel layer splits W's *output rows*: y_r = x W_r^T, and the ranks' outputs side by
    side are the full output. One layer may merge several checkpoint matrices (q|k|v, gate|up):
    self.parts[part] = (rows of that matrix, rows this rank keeps, first row this rank keeps), and
    that part's rows sit in param from row self.offsets[part] on (param.narrow(0, offset, n))."""
    _, n, start = self.parts[part]
    param.narrow(0, self.offsets[part], n).copy_(sl[0:n])


def row_load(self, param, sl, part=None) -> None:
    """RowParallelLinear._load: copy this rank's columns of the checkpoint weight `sl` ([out, in]) into
    `param` ([out, in / tp]).

    A row-parallel layer splits W's *input columns*: rank r computes x_r W_r^T from its slice of the
    input, and an all-reduce sums the partial results. This rank's columns start at self.start."""
    param.copy_(sl[:, self.start:self.start + param.shape[1]])


