"""receive whose rank 0 broadcasts the count but never forwards the messages.

EXPECT: never forwarded
"""

from minisgl_edu.exercises.swap import patched

receive = patched("minisgl_edu.tp:receive",
    ('inbox.forward(raws)',
     'pass'))
