"""encode that sends a tensor as a list of numbers: the receiver gets a list, not a tensor.

EXPECT: reads back
"""

from minisgl_edu.exercises.swap import patched

encode = patched("minisgl_edu.messages:encode",
    ('return {"__type__": "Tensor", "dtype": dtype, "buffer": v.contiguous().numpy().tobytes()}',
     'return v.tolist()'),
    calls=("_to_wire",))
