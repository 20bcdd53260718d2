"""try_add that uses the whole matched prefix: a fully cached prompt has nothing left to compute.

EXPECT: cached_len
"""

from minisgl_edu.exercises.swap import patched

try_add = patched("minisgl_edu.prefill:PrefillAdder.try_add",
    ('matched = min(len(locs), (req.prompt_len - 1) // ps * ps)',
     'matched = len(locs)'))
