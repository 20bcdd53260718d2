"""Chapter 8's reference solution: the sharded layers' `_load` (`minisgl_edu/model/layers.py`) and
`receive` (`minisgl_edu/tp.py`)."""
from minisgl_edu.model.layers import ColumnParallelLinear, RowParallelLinear
from minisgl_edu.tp import receive  # noqa: F401

column_load, row_load = ColumnParallelLinear._load, RowParallelLinear._load
