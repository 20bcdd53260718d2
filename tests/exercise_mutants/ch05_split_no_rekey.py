"""split that leaves the parent pointing at the lower node.

EXPECT: integrity
"""

from minisgl_edu.exercises.swap import patched

split = patched("minisgl_edu.radix:RadixCache._split",
    ('node.parent.children[self._child_key(node.key)] = upper',
     'pass'))
