"""decode that reads every tensor buffer as int32.

EXPECT: gave
"""

from minisgl_edu.exercises.swap import patched

decode = patched("minisgl_edu.messages:decode",
    ('dtype=str(dtype).removeprefix("torch.")',
     'dtype="int32"'),
    calls=("_from_wire",))
