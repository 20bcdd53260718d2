"""Chapter 1: every message crosses a boundary and comes back equal; bad bytes are refused clearly."""
from __future__ import annotations

import dataclasses

import msgpack
import pytest
import torch

from minisgl_edu import messages as M
from minisgl_edu.req import SamplingParams

SP = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, max_tokens=12, ignore_eos=True, seed=3)
IDS = torch.tensor([1, 9690, 198, 2683, 49151], dtype=torch.int32)

EXAMPLES = [
    M.TokenizeMsg(1, "The capital of France is", None, SP),
    M.TokenizeMsg(2, None, [{"role": "user", "content": "héllo 日本 🙂"}], SamplingParams()),
    M.TokenizeMsg(3, None, None, SP, [5, 6, 7]),
    M.UserMsg(4, IDS, SP),
    M.AbortMsg(5),
    M.StatsMsg(6),
    M.ExitMsg(),
    M.BatchBackendMsg([M.UserMsg(7, IDS[:2], SP), M.AbortMsg(8), M.StatsMsg(9)]),
    M.DetokenizeMsg(10, 42, False),
    M.DetokenizeMsg(11, -1, True, "error", 9000, error="too long", status=413),
    M.DetokenizeMsg(12, 2, True, "stop", 37, clamped=True),
    M.StatsReply(13, 100, 90, 10, 0, "ok"),
    M.BatchTokenizerMsg([M.DetokenizeMsg(14, 7, False), M.StatsReply(15, 1, 1, 0, 0, "busy")]),
    M.UserReply(16, "Paris", True, "stop", 37, 8, warning="cut"),
    M.UserReply(17, "", True, "error", error="boom", status=503),
    M.BatchFrontendMsg([M.UserReply(18, "a", False), M.UserReply(19, "b", True, "length", 3, 4)]),
    M.RecordMsg(logits=True, live=True),
    M.ReportMsg(),
    M.BatchRecord("prefill", (1,), (0,), (2,), (4, 5)),
    M.BatchRecord("decode", (3, 4), (7, 9), (1, 1), (70, 91), (5, 6), rank=1),
    M.RankReport(0, "cpu", {"layers.0.mlp.down_proj.weight": (64, 32)},
                 [M.BatchRecord("prefill", (3,), (0,), (7,), (0, 1, 2, 3, 4, 5, 6))],
                 [torch.arange(6, dtype=torch.float32)], vocab=3),
    M.UserReply(20, "", False, output_ids=[5, 6]),
    M.SchedulerStats(2, 1, 100, 50, 10, 300, 120, [0.01, 0.1], {"decode": [3, 1, 0]}, {"decode": 0.05}),
    M.AckMsg("tokenizer-0", 1234),
    M.AckMsg("scheduler-rank0", 99, "Traceback ..."),
    M.BatchTokenizerMsg([M.TokenColumns([1, 2, 3], [40, 41, 42]), M.DetokenizeMsg(4, 2, True, "stop", 9)]),
    M.BatchFrontendMsg([M.ReplyColumns([1, 2], ["a", "日本"], [3, 4]), M.ReplyColumns([5], [""], [1], [[7, 8]])]),
]


def same(a, b) -> bool:
    """Deep equality that compares tensors by dtype, shape and values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def test_every_message_type_is_exercised():
    covered = {type(m).__name__ for m in EXAMPLES} | {type(x).__name__ for m in EXAMPLES for x in getattr(m, "data", [])}
    covered |= {"SamplingParams"}
    assert covered == set(M.MESSAGE_TYPES)


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    raw = M.encode(msg)
    assert isinstance(raw, bytes)
    back = M.decode(raw)
    assert same(msg, back), (msg, back)
    assert M.encode(back) == raw  # forwarding decoded bytes re-encodes to the same bytes


def test_rank_records_compare_equal_after_the_wire():
    """Tuples become lists in msgpack: a record off the wire must still equal the one recorded locally."""
    rec = M.BatchRecord("decode", (3, 4), (7, 9), (1, 1), (70, 91), (5, 6), rank=1)
    back = M.decode(M.encode(rec))
    assert back == rec and back.rank == 1
    assert back == M.BatchRecord("decode", (3, 4), (7, 9), (1, 1), (70, 91), (5, 6))  # as rank 0 saw it
    report = M.decode(M.encode(EXAMPLES[[type(m) for m in EXAMPLES].index(M.RankReport)]))
    assert report.shard_shapes == {"layers.0.mlp.down_proj.weight": (64, 32)}
    assert report.logits[0].shape == (2, 3)  # [rows, vocab] again


def test_tensor_travels_as_raw_bytes_and_keeps_dtype():
    raw = M.encode(M.UserMsg(0, IDS, SP))
    wire = msgpack.unpackb(raw, raw=False)
    assert wire["input_ids"] == {"__type__": "Tensor", "dtype": "int32", "buffer": IDS.numpy().tobytes()}
    assert wire["sampling_params"]["__type__"] == "SamplingParams"
    back = M.decode(raw)
    back.input_ids[0] = 7  # the decoded tensor owns its memory (writable, not a view of the bytes)
    assert back.input_ids.dtype == torch.int32 and back.input_ids.tolist()[1:] == IDS.tolist()[1:]


@pytest.mark.parametrize("tensor", [torch.zeros(2, 3, dtype=torch.int32), torch.tensor(5, dtype=torch.int32)],
                         ids=["2-D", "0-D"])
def test_only_1d_tensors_cross(tensor):
    with pytest.raises(M.MessageError, match="only 1-D tensors"):
        M.encode(M.UserMsg(0, tensor, SP))


def test_unknown_type_is_refused_not_imported():
    for name in ("os.system", "Popen", "Req", "object"):
        raw = msgpack.packb({"__type__": name, "uid": 1}, use_bin_type=True)
        with pytest.raises(M.MessageError, match="unknown message type"):
            M.decode(raw)
    nested = msgpack.packb({"__type__": "AbortMsg", "uid": {"__type__": "Evil"}}, use_bin_type=True)
    with pytest.raises(M.MessageError, match="unknown message type 'Evil'"):
        M.decode(nested)


def test_crafted_messages_are_refused():
    bad = [
        ({"__type__": "UserMsg", "uid": 1, "input_ids": {"__type__": "Tensor", "dtype": "int32", "buffer": b"\0" * 8,
                                                        "shape": [2, 1]}, "sampling_params": None}, "malformed tensor"),
        ({"__type__": "UserMsg", "uid": 1, "input_ids": {"__type__": "Tensor", "dtype": "bfloat16", "buffer": b""},
          "sampling_params": None}, "malformed tensor"),
        ({"__type__": "AbortMsg", "uid": 1, "extra": 2}, "no field"),
        ({"__type__": "AbortMsg"}, "malformed AbortMsg"),
        ({"uid": 1}, "__type__"),
    ]
    for obj, match in bad:
        with pytest.raises(M.MessageError, match=match):
            M.decode(msgpack.packb(obj, use_bin_type=True))
    with pytest.raises(M.MessageError, match="not a msgpack"):
        M.decode(b"\xc1 not msgpack")


def test_encoder_refuses_what_it_cannot_carry():
    @dataclasses.dataclass
    class Stranger:
        uid: int
    with pytest.raises(M.MessageError, match="not a message type"):
        M.encode(Stranger(1))
    with pytest.raises(M.MessageError, match="cannot send a set"):
        M.encode(M.TokenizeMsg(1, None, [{"role": {1, 2}}], SP))
    with pytest.raises(M.MessageError, match="__type__"):
        M.encode(M.TokenizeMsg(1, None, [{"__type__": "UserMsg"}], SP))
    with pytest.raises(M.MessageError, match="dtype"):
        M.encode(M.UserMsg(0, torch.zeros(3, dtype=torch.bfloat16), SP))


def test_unbatch():
    batch = M.BatchBackendMsg([M.AbortMsg(1), M.StatsMsg(2)])
    assert [type(m) for m in M.unbatch(batch)] == [M.AbortMsg, M.StatsMsg]
    assert M.unbatch(M.AbortMsg(3)) == [M.AbortMsg(3)]
