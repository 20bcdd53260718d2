"""complete_one that shifts both ends by one: right for a decode step, wrong after a prefill.

EXPECT: the window moves to
"""

from minisgl_edu.exercises.swap import patched

complete_one = patched("minisgl_edu.req:Req.complete_one",
    ('self.cached_len = self.device_len',
     'self.cached_len += 1'))
