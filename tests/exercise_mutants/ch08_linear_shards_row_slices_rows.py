"""row_load that slices output rows, as a column-parallel layer would.

EXPECT: your row_load raised
"""

from minisgl_edu.exercises.swap import patched
from minisgl_edu.model.layers import ColumnParallelLinear

row_load = patched("minisgl_edu.model.layers:RowParallelLinear._load",
    ('sl[:, self.start:self.start + param.shape[1]]',
     'sl[self.start:self.start + param.shape[0]][:, : param.shape[1]]'))
column_load = ColumnParallelLinear._load
