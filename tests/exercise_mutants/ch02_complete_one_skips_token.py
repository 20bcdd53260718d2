"""complete_one that jumps two tokens ahead.

EXPECT: the window moves to
"""
from __future__ import annotations


def complete_one(self) -> None:
    self.cached_len = self.device_len
    self.device_len += 2
