"""Solutions to the exercises of notebook 03 (the prefill budget)."""


def chunks_at_48():
    # the long prompt comes first every step and takes the whole budget until the last 150 - 3*48 = 6
    return [48, 48, 48, 6]


def pages_needed(max_device_len, cached_len, page_size):
    cdiv = lambda a, b: -(-a // b)
    return cdiv(max_device_len, page_size) - cdiv(cached_len, page_size)  # its partial page is already owned


def largest_max_tokens():
    # free 64 - 24 = 40 pages, reserved 2 * 12 = 24: 10 + max_tokens + 24 <= 40
    return 6
