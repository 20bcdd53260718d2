"""pages_to_finish over the span: ceil((max_device_len - cached_len) / page_size) ignores the partial page already owned.

EXPECT: already owned
"""
from __future__ import annotations

import torch

from minisgl_edu.paging import cdiv
from minisgl_edu.prefill import pages_to_finish


def pages_to_finish(req, page_size):  # noqa: F811
    return cdiv(req.max_device_len - req.cached_len, page_size)
