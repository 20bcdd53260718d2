"""evict that drops the most recently used leaf first (MRU instead of LRU).

EXPECT: evict freed
"""

from minisgl_edu.exercises.swap import patched

evict = patched("minisgl_edu.radix:RadixCache.evict",
    ('leaf = heapq.heappop(leaves)',
     'leaf = max(leaves); leaves.remove(leaf)'))
