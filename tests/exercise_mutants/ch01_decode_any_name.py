"""decode that looks a type name up in the messages module: bytes from a socket can build anything there.

EXPECT: 'dataclass'
"""

from minisgl_edu.exercises.swap import patched

decode = patched("minisgl_edu.messages:decode",
    ('cls = MESSAGE_TYPES.get(name)',
     'cls = globals().get(name)'),
    calls=("_from_wire",))
