"""encode that forgets the 1-D rule: a 2-D tensor is flattened and sent.

EXPECT: 2-D tensor
"""

from minisgl_edu.exercises.swap import patched

encode = patched("minisgl_edu.messages:encode",
    ('if v.dim() != 1:',
     'if (v := v.flatten()).dim() != 1:'),
    calls=("_to_wire",))
