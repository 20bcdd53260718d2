"""Chapter 2: Req.complete_one, checked on every window, then inside the engine."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import Wrong
from ..oracle import STANDARD_CASES, compare
from ..swap import swapped
from . import call, prop


def grade_complete_one(ex, path, module) -> None:
    from ...req import Req, SamplingParams

    def check(w):
        prompt, max_tokens, cached, extra = w
        r = Req(0, list(range(prompt)), SamplingParams(max_tokens=max_tokens))
        r.cached_len, r.device_len = cached, min(cached + extra, r.max_device_len)
        before = (r.cached_len, r.device_len)
        call("complete_one", module.complete_one, r, on=f"window (cached_len, device_len) = {before}")
        want = (before[1], before[1] + 1)
        if (r.cached_len, r.device_len) != want:
            raise Wrong(f"from (cached_len, device_len) = {before} (prompt {prompt}, max_tokens {max_tokens}) your "
                        f"complete_one gave {(r.cached_len, r.device_len)}; the window moves to {want}")

    prop(st.tuples(st.integers(1, 40), st.integers(1, 20), st.integers(0, 50), st.integers(1, 40))
         .filter(lambda w: w[2] < w[0] + w[1] - 1), check, explicit=((5, 3, 0, 5), (5, 3, 5, 1)))
    with swapped([ex], lambda e: path):
        for case in STANDARD_CASES[:2]:
            compare(case, "complete_one")
