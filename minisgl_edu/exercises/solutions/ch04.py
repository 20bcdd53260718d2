"""Chapter 4's reference solution: `PagePool.assign_locations` and `PagePool.free_tail` in `minisgl_edu/paging.py`."""
from minisgl_edu.paging import PagePool

assign_locations, free_tail = PagePool.assign_locations, PagePool.free_tail
