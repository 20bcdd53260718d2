"""Solutions to the exercises of notebook 02 (Req and Batch)."""


def exercise_1():
    # prefill: cached 0, device 7; then three windows move: (7, 8), (8, 9), (9, 10); remain = 11 - 10
    return (9, 10, 1)


def num_batch_tokens(windows):
    return sum(device - cached for cached, device in windows)  # one entry per extended token


def resubmitted_cached_len(n):
    return n - 1  # the last prompt token is recomputed: its logits give the first output token
