"""free_tail that ignores in_step: a request finished in the middle of a step keeps the pages of the positions
assigned in that step.

EXPECT: assigned this step, are
"""

import torch

from minisgl_edu.exercises.swap import patched

pages_of = patched("minisgl_edu.paging:PagePool.pages_of", ('req.device_len if in_step else req.cached_len', 'req.cached_len'))


def free_tail(self, req, start: int, in_step: bool = False) -> None:  # the library's, with the wrong pages_of
    self.free_pages = torch.cat([self.free_pages, pages_of(self, req, start, in_step)])
