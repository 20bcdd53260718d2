"""complete_one that only grows device_len: the next step recomputes everything.

EXPECT: the window moves to
"""
from __future__ import annotations


def complete_one(self) -> None:
    self.device_len += 1
