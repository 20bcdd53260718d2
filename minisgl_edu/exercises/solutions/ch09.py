"""Chapter 9's reference solution: `detokenize_next` in `minisgl_edu/server/tokenizer.py`."""
from minisgl_edu.server.tokenizer import detokenize_next  # noqa: F401
