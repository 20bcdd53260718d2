"""kernel_args whose padding lanes read row 0 (a real request's) instead of the dummy row.

EXPECT: kv_indices
"""

from minisgl_edu.exercises.swap import patched

kernel_args = patched("minisgl_edu.attention.base:kernel_args",
    ('[pool.dummy_row] * pads',
     '[0] * pads'))
