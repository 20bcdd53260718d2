"""walk that never updates last_access: LRU eviction picks the wrong leaf.

EXPECT: evict
"""

from minisgl_edu.exercises.swap import patched

walk = patched("minisgl_edu.radix:RadixCache._walk",
    ('child.last_access = now',
     'pass'))
