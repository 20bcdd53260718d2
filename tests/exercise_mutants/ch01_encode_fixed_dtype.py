"""encode that always labels a tensor int32.

EXPECT: reads back
"""

from minisgl_edu.exercises.swap import patched

encode = patched("minisgl_edu.messages:encode",
    ('"dtype": dtype, "buffer"',
     '"dtype": "int32", "buffer"'),
    calls=("_to_wire",))
