"""complete_one that shifts both ends by one: right for a decode step, wrong after a prefill.

EXPECT: the window moves to
"""
from __future__ import annotations


def complete_one(self) -> None:
    self.cached_len += 1
    self.device_len += 1
