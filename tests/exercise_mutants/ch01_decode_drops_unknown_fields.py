"""decode that silently drops fields the class does not have.

EXPECT: field 'cmd'
"""

from minisgl_edu.exercises.swap import patched

decode = patched("minisgl_edu.messages:decode",
    ('for k, x in v.items() if k != "__type__"}',
     'for k, x in v.items() if k in _field_names(cls)}'),
    calls=("_from_wire",))
