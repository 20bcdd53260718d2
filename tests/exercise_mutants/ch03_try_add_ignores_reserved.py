"""try_add that forgets the reserved size in condition 3.

EXPECT: the library for condition 3
"""

from minisgl_edu.exercises.swap import patched

try_add = patched("minisgl_edu.prefill:PrefillAdder.try_add",
    ("if need + self.reserved_pages > self.available_pages():\n                req.cached_len = 0",
     "if need > self.available_pages():\n                req.cached_len = 0"))
