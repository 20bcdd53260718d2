"""feed that returns at most one message a read (it stops after the first): a read that holds two steps' messages
gives back only the first, and the rest falls behind.

EXPECT: want them whole, in order
"""

from minisgl_edu.exercises.swap import patched

feed = patched("minisgl_edu.server.queues:Frames.feed",
    ('            i += HEADER.size + size',
     '            i += HEADER.size + size\n            break'))
