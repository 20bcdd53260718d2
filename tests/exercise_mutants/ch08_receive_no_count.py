"""receive where every rank takes what it has seen (no broadcast count).

EXPECT: every rank must receive
"""
from __future__ import annotations

import queue

from minisgl_edu import tp


def receive(inbox, block: bool, use_count: bool = True, wait=None) -> list:
    """tp.receive: this step's messages, the same on every rank.

    Every rank has its own copy of the message stream (`inbox`: get_nowait() raises queue.Empty when
    nothing is there yet); the other ranks' copies may lag behind rank 0's. `wait(inbox)` is the
    blocking get (default: inbox.get()). block=True: the engine is idle, so first wait for one
    message. Then rank 0 (tp.get_tp_info().is_primary) takes everything already there, and tells
    every rank how many with tp.broadcast_count(n) (every rank calls it once; the others pass any
    number and get rank 0's); the other ranks then take exactly that many, waiting for late ones.
    use_count=False: every rank takes what it has (chapter 8's counter-example: no broadcast)."""
    wait = wait or (lambda q: q.get())
    msgs = [wait(inbox)] if block else []
    use_count = False
    if tp.get_tp_info().is_primary or not use_count:
        while True:
            try:
                msgs.append(inbox.get_nowait())
            except queue.Empty:
                break
    if use_count:
        n = tp.broadcast_count(len(msgs))
        while len(msgs) < n:  # the stream is the same on every rank: the missing ones are on their way
            msgs.append(wait(inbox))
    return msgs
