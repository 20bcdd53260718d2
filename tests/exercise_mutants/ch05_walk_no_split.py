"""walk that follows a partly shared edge to its end instead of splitting it.

EXPECT: match_prefix returned
"""

from minisgl_edu.exercises.swap import patched

walk = patched("minisgl_edu.radix:RadixCache._walk",
    ('child = self._split(child, n)',
     'break'))
