"""Chapter 3's reference solution: `pages_to_finish` and `PrefillAdder.try_add` in `minisgl_edu/prefill.py`."""
from minisgl_edu.prefill import PrefillAdder, pages_to_finish  # noqa: F401

try_add = PrefillAdder.try_add
