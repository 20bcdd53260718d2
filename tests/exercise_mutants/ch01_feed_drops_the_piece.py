"""feed that forgets the piece of a message a read ended in (it empties the buffer after each read).

EXPECT: want them whole, in order
"""

from minisgl_edu.exercises.swap import patched

feed = patched("minisgl_edu.server.queues:Frames.feed",
    ('        if i:\n            del buf[:i]',
     '        buf.clear()'))
