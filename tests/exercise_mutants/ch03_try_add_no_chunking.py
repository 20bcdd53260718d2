"""try_add that never chunks: extends the whole prompt whatever the budget left.

EXPECT: device_len
"""

from minisgl_edu.exercises.swap import patched

try_add = patched("minisgl_edu.prefill:PrefillAdder.try_add",
    ('chunk = min(req.prompt_len - req.cached_len, self.token_budget)',
     'chunk = req.prompt_len - req.cached_len'))
