"""column_load where every rank takes rank 0's rows.

EXPECT: column-parallel shard
"""

from minisgl_edu.exercises.swap import patched
from minisgl_edu.model.layers import RowParallelLinear

column_load = patched("minisgl_edu.model.layers:ColumnParallelLinear._load",
    ('sl[start:start + n]',
     'sl[0:n]'))
row_load = RowParallelLinear._load
