"""try_add without condition 1: admits with no free page-table row.

EXPECT: 1: no free page-table row
"""

from minisgl_edu.exercises.swap import patched

try_add = patched("minisgl_edu.prefill:PrefillAdder.try_add",
    ('if fresh and not self.pool.free_rows:',
     'if False:'))
