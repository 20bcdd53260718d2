"""Chapter 7's reference solution: `kernel_args` in `minisgl_edu/attention/metadata.py`."""
from minisgl_edu.attention.metadata import kernel_args  # noqa: F401
