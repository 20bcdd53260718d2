"""kernel_args that ignores padded_tokens: a prefill graph's attention would be planned for fewer rows than
it was captured with (FlashInfer refuses, or the slack rows read stale plans).

EXPECT: cu_seqlens_q
"""

from minisgl_edu.exercises.swap import patched

kernel_args = patched("minisgl_edu.attention.base:kernel_args",
    ('    if pads and padded_tokens:', '    if False:'))
