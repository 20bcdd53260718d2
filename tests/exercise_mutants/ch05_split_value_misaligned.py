"""split that cuts the value one slot late: keys and KV locations no longer line up.

EXPECT: len(locs) == depth
"""

from minisgl_edu.exercises.swap import patched

split = patched("minisgl_edu.radix:RadixCache._split",
    ('node.value[:at], node.parent',
     'node.value[:at + 1], node.parent'))
