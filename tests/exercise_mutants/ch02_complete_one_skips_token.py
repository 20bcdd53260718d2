"""complete_one that jumps two tokens ahead.

EXPECT: the window moves to
"""

from minisgl_edu.exercises.swap import patched

complete_one = patched("minisgl_edu.req:Req.complete_one",
    ('self.device_len += 1',
     'self.device_len += 2'))
