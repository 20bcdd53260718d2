"""kernel_args that forgets the cached prefix: each request attends only to this step's new tokens.

EXPECT: cu_seqlens_k
"""

from minisgl_edu.exercises.swap import patched

kernel_args = patched("minisgl_edu.attention.base:kernel_args",
    ('[r.device_len for r in reqs]',
     '[r.extend_len for r in reqs]'))
