"""complete_one that only grows device_len: the next step recomputes everything.

EXPECT: the window moves to
"""

from minisgl_edu.exercises.swap import patched

complete_one = patched("minisgl_edu.req:Req.complete_one",
    ('self.cached_len = self.device_len',
     'pass'))
