"""kernel_args that ignores padded_size: no padding lanes at all.

EXPECT: cu_seqlens_q
"""

from minisgl_edu.exercises.swap import patched

kernel_args = patched("minisgl_edu.attention.base:kernel_args",
    ('pads = max(0, padded_size - len(reqs))',
     'pads = 0'))
