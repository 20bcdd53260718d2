"""Chapter 9 exercises — the server's detokenizer. Write the function, then grade it:

    python -m minisgl_edu.exercises check 09

`detokenize_next` replaces `minisgl_edu.server.tokenizer.detokenize_next`. The grader feeds random
texts (accents, CJK, emoji: characters of several bytes, split across tokens) one token at a time
and checks that no broken character is ever sent, that nothing complete is held back, and that the
pieces add up to the text; then it runs the server's real detokenizer loop with your function.
"""
from __future__ import annotations

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.server.tokenizer import DecodeState  # ids, prefix_offset, read_offset


def detokenize_next(tok, state: DecodeState, token: int, final: bool = False) -> str:
    """Add `token` (-1 = none) to state.ids and return the text that is now complete (at the end, with
    final=True: everything left).

    Decode a short window, tok.decode(ids[prefix_offset:], skip_special_tokens=True), and compare it
    with what that window's already-sent part decodes to (ids[prefix_offset:read_offset]): the
    difference is new. Send it only if the window does not end in U+FFFD ("\\ufffd", the decoding
    of an incomplete UTF-8 character), or if final; then move the window: prefix_offset to the old
    read_offset, read_offset to len(ids). Otherwise send "" and keep the ids for next time. (The library
    also lets go of a hold of 4 or more tokens, bytes no later token can complete: `let_go`, chapter 1.
    The grader's texts are valid UTF-8 and do not ask for it.)"""
    raise NotAttempted  # your code here
