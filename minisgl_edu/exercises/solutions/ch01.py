"""Chapter 1's reference solution: the library's own wire format, `minisgl_edu/messages.py`."""
from minisgl_edu.messages import decode, encode  # noqa: F401
