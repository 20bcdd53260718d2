"""Chapter 2 exercises — Req and Batch. Write each function, then grade it:

    python -m minisgl_edu.exercises check 02

Your function replaces the library's `Req.complete_one` while it is graded: the property tests
check the window, then the real engine runs with it and must give the library's tokens.
"""
from __future__ import annotations

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)


def complete_one(self) -> None:
    """Req.complete_one: the step that extended [cached_len, device_len) has run, and its last position
    produced one token. Move the window by one token: what was on the device is now cached, and the
    next step extends exactly the new token.

    Before: 0 <= cached_len < device_len <= max_device_len. After: cached_len == old device_len and
    device_len == old device_len + 1 (so extend_len == 1)."""
    self.cached_len = self.device_len
    self.device_len += 1
