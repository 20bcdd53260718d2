"""evict that drops only one leaf, however many tokens were asked for.

EXPECT: evict freed
"""

from minisgl_edu.exercises.swap import patched

evict = patched("minisgl_edu.radix:RadixCache.evict",
    ('while total < num_tokens and leaves:',
     'while total < min(num_tokens, 1) and leaves:'))
