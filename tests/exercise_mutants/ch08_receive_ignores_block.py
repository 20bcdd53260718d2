"""receive whose rank 0 never waits for the first message of an idle engine.

EXPECT: every rank must receive
"""
from __future__ import annotations

from minisgl_edu import tp


def receive(inbox, block: bool, use_count: bool = True) -> list[bytes]:
    """This step's messages (raw bytes), the same on every rank.

    `inbox` is this rank's end of the wires (server/scheduler_proc.RankIO); three calls:
      inbox.take(block) -> list[bytes]: what has arrived (block=True: the engine is idle, so first
          wait a little for one message; on rank 0 this is the mailbox everybody sends to);
      inbox.forward(raws): rank 0 re-publishes these bytes, unchanged, to ranks 1..N-1;
      inbox.next() -> bytes: on ranks 1..N-1, the next message rank 0 forwarded (waits for it).
    Rank 0 (tp.get_tp_info().is_primary) takes what arrived and tells every rank how many with
    tp.broadcast_count(n) (every rank calls it once; the others pass any number and get rank 0's);
    the other ranks then read exactly that many forwarded messages, however late they come, and
    rank 0 forwards what it took. use_count=False: every rank takes what *it* has seen (chapter 8's
    counter-example: no broadcast, and rank 0 forwards what it took all the same)."""
    primary = tp.get_tp_info().is_primary
    raws = inbox.take(False) if primary or not use_count else []
    if use_count:
        n = tp.broadcast_count(len(raws))
        while len(raws) < n:  # rank 0 forwards them just below: they are on their way
            raws.append(inbox.next())
    if primary:
        inbox.forward(raws)  # the bytes as received: never decoded and encoded again
    return raws
