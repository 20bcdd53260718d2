"""pages_to_finish over the span: ceil((max_device_len - cached_len) / page_size) ignores the partial page already owned.

EXPECT: already owned
"""

from minisgl_edu.exercises.swap import patched

pages_to_finish = patched("minisgl_edu.prefill:pages_to_finish",
    ('cdiv(req.max_device_len, page_size) - cdiv(req.cached_len, page_size)',
     'cdiv(req.max_device_len - req.cached_len, page_size)'))
