"""Chapter 2 — Req and Batch: the three lengths and the window that `complete_one()` moves."""
from __future__ import annotations

import pytest

from minisgl_edu.req import Batch, Req, SamplingParams


def test_lengths_at_creation():
    req = Req(0, [5, 6, 7, 8], SamplingParams(max_tokens=3))
    assert (req.prompt_len, req.max_device_len) == (4, 7)
    assert req.output_ids == [] and req.remain_len == 7 - req.device_len


def test_prefill_then_decode_window():
    req = Req(0, list(range(10)), SamplingParams(max_tokens=4))
    req.cached_len, req.device_len = 6, 10  # a prefix of 6 matched; the other 4 extend this step
    req.check()
    assert req.extend_len == 4 and not req.is_chunked
    for step in range(4):
        before = (req.cached_len, req.device_len)
        req.complete_one()
        assert (req.cached_len, req.device_len) == (before[1], before[1] + 1)  # the window moves by one
        assert req.extend_len == 1
        req.check()
    assert req.device_len == req.max_device_len == 14
    assert req.remain_len == 0


def test_chunked_request_is_flagged():
    req = Req(0, list(range(100)), SamplingParams())
    req.cached_len, req.device_len = 32, 64
    assert req.is_chunked and req.extend_len == 32
    req.device_len = 100
    assert not req.is_chunked


@pytest.mark.parametrize("cached,device", [(-1, 3), (3, 3), (4, 3), (0, 15)])
def test_check_rejects_broken_ledgers(cached, device):
    req = Req(0, list(range(10)), SamplingParams(max_tokens=4))  # max_device_len 14
    req.cached_len, req.device_len = cached, device
    with pytest.raises(AssertionError):
        req.check()


def test_output_ids_are_the_generated_part():
    req = Req(0, [1, 2, 3], SamplingParams(max_tokens=5))
    req.token_ids += [9, 8]
    assert req.output_ids == [9, 8]


@pytest.mark.parametrize("kw,field", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(top_p=-1), "top_p"), (dict(top_k=0), "top_k"), (dict(top_k=-2), "top_k"), (dict(top_k=2.5), "top_k"),
    (dict(max_tokens=0), "max_tokens"), (dict(max_tokens=-3), "max_tokens"), (dict(max_tokens=1.5), "max_tokens"),
])
def test_sampling_params_validate(kw, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kw).validate()


def test_sampling_params_valid_extremes():
    for kw in [dict(), dict(temperature=0), dict(temperature=2.0, top_k=1, top_p=1e-9), dict(top_k=-1, top_p=1.0)]:
        SamplingParams(**kw).validate()  # must not raise


def test_batch_phase_and_size():
    reqs = [Req(i, [1, 2], SamplingParams()) for i in range(3)]
    b = Batch(reqs, "decode")
    assert b.size == 3 and not b.is_prefill and Batch(reqs[:1], "prefill").is_prefill
