"""overlap_step that forgets deferred_rows: the rows of requests finished in flight are never given back.

EXPECT: still in deferred_rows
"""

from minisgl_edu.exercises.swap import patched

overlap_step = patched("minisgl_edu.scheduler:Scheduler.step",
    ('self.pool.release_row(row)',
     'pass'),
    ('self.deferred_rows.clear()',
     'pass'))
