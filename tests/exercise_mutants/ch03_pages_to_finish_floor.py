"""pages_to_finish with floor division: misses the page of a partial tail.

EXPECT: pages_to_finish says
"""
from __future__ import annotations

import torch

from minisgl_edu.paging import cdiv
from minisgl_edu.prefill import pages_to_finish


def pages_to_finish(req, page_size):  # noqa: F811
    return req.max_device_len // page_size - req.cached_len // page_size
