"""detokenize_next that sends nothing until the last token.

EXPECT: as soon as it decodes
"""
from __future__ import annotations

from minisgl_edu.server.tokenizer import DecodeState


def detokenize_next(tok, state: DecodeState, token: int, final: bool = False) -> str:
    """Add `token` (-1 = none) to state.ids and return the text that is now complete (at the end, with
    final=True: everything left).

    Decode a short window, tok.decode(ids[prefix_offset:], skip_special_tokens=True), and compare it
    with what that window's already-sent part decodes to (ids[prefix_offset:read_offset]): the
    difference is new. Send it only if the window does not end in U+FFFD ("\\ufffd", the decoding
    of an incomplete UTF-8 character), or if final; then move the window: prefix_offset to the old
    read_offset, read_offset to len(ids). Otherwise send "" and keep the ids for next time."""
    if token >= 0:
        state.ids.append(token)
    sent = tok.decode(state.ids[state.prefix_offset:state.read_offset], skip_special_tokens=True)
    window = tok.decode(state.ids[state.prefix_offset:], skip_special_tokens=True)
    if len(window) > len(sent) and final:
        state.prefix_offset, state.read_offset = state.read_offset, len(state.ids)
        return window[len(sent):]
    return ""
