"""assign_locations that opens a fresh page for a partial last page instead of continuing it.

EXPECT: took
"""

from minisgl_edu.exercises.swap import patched

assign_locations = patched("minisgl_edu.paging:PagePool.assign_locations",
    ('first_new = cdiv(cached, ps)',
     'first_new = cached // ps'))
