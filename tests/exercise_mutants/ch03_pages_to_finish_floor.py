"""pages_to_finish with floor division: misses the page of a partial tail.

EXPECT: pages_to_finish says
"""

from minisgl_edu.exercises.swap import patched

pages_to_finish = patched("minisgl_edu.prefill:pages_to_finish",
    ('cdiv(req.max_device_len, page_size) - cdiv(req.cached_len, page_size)',
     'req.max_device_len // page_size - req.cached_len // page_size'))
