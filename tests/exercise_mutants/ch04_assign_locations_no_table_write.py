"""assign_locations that returns out_loc but never writes the page table.

EXPECT: page-table entry
"""

from minisgl_edu.exercises.swap import patched

assign_locations = patched("minisgl_edu.paging:PagePool.assign_locations",
    ('self.page_table[rows_t, pos_t] = loc',
     'pass'))
