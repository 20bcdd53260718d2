"""column_load that writes every merged part at row 0 (ignores self.offsets).

EXPECT: q|k|v
"""

from minisgl_edu.exercises.swap import patched
from minisgl_edu.model.layers import RowParallelLinear

column_load = patched("minisgl_edu.model.layers:ColumnParallelLinear._load",
    ('param.narrow(0, self.offsets[part], n)',
     'param.narrow(0, 0, n)'))
row_load = RowParallelLinear._load
