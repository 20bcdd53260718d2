"""Chapter 5's reference solution: `RadixCache._walk`, `_split` and `evict` in `minisgl_edu/radix.py`."""
from minisgl_edu.radix import RadixCache

walk, split, evict = RadixCache._walk, RadixCache._split, RadixCache.evict
