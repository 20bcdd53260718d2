"""free_tail that ignores `start` and frees from position 0: the cached prefix's pages too.

EXPECT: before `start`
"""

import torch

from minisgl_edu.exercises.swap import patched

pages_of = patched("minisgl_edu.paging:PagePool.pages_of", ('start = req.matched_len if start is None else start', 'start = 0'))


def free_tail(self, req, start: int, in_step: bool = False) -> None:  # the library's, with the wrong pages_of
    self.free_pages = torch.cat([self.free_pages, pages_of(self, req, start, in_step)])
