"""walk that shares partial pages (no rounding down to whole pages).

EXPECT: match_prefix
"""

from minisgl_edu.exercises.swap import patched

walk = patched("minisgl_edu.radix:RadixCache._walk",
    ('n -= n % self.page_size',
     'pass'))
