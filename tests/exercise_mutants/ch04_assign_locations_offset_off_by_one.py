"""assign_locations with the in-page offset of a fresh page off by one.

EXPECT: offset
"""

from minisgl_edu.exercises.swap import patched

assign_locations = patched("minisgl_edu.paging:PagePool.assign_locations",
    ('loc = pages[to_dev(order)] * ps + (pos_t % ps)',
     'loc = pages[to_dev(order)] * ps + ((pos_t + 1) % ps)'),
    ('* ps + (pos_t[new_t] % ps)',
     '* ps + ((pos_t[new_t] + 1) % ps)'))
