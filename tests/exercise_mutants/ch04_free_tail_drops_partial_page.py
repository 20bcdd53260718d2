"""free_tail that rounds the end down: the partial last page leaks.

EXPECT: partial last page
"""

import torch

from minisgl_edu.exercises.swap import patched

pages_of = patched("minisgl_edu.paging:PagePool.pages_of", ('cdiv(end, ps) * ps', 'end // ps * ps'))


def free_tail(self, req, start: int, in_step: bool = False) -> None:  # the library's, with the wrong pages_of
    self.free_pages = torch.cat([self.free_pages, pages_of(self, req, start, in_step)])
