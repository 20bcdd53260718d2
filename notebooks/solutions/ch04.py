"""Solutions to the exercises of notebook 04 (pages and the page table)."""


def new_pages(cached_len, extend_len, page_size):
    cdiv = lambda a, b: -(-a // b)
    # pages below cdiv(cached_len) exist already (the last may be partial and is continued)
    return cdiv(cached_len + extend_len, page_size) - cdiv(cached_len, page_size)


def next_slot(pool, req):
    """The slot of position req.device_len: continue the partial last page, else open the first free page."""
    ps, pos = pool.page_size, req.device_len
    if pos % ps:  # offset > 0: the page exists; same page, next offset
        return int(pool.page_table[req.table_idx, pos - pos % ps]) + pos % ps
    return int(pool.free_pages[0]) * ps  # a page boundary: the head of the free list


def waste(device_len, page_size):
    pages = -(-device_len // page_size)
    return (pages * page_size - device_len, pages)
