"""evict that also drops locked leaves.

EXPECT: locked node
"""

from minisgl_edu.exercises.swap import patched

evict = patched("minisgl_edu.radix:RadixCache.evict",
    ('and n.ref_count == 0]',
     ']'))
