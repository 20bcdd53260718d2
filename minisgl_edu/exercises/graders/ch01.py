"""Chapter 1: the message codec — round trips against the library's other half, the refusals, then real
ZMQ sockets (the server's Queue) carrying your bytes; the replies' framing — random cuts of framed messages, then a
real plain-socket pair (the server's SocketOutbox / SocketInbox) reading through your feed."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile

from hypothesis import strategies as st

from .. import Wrong
from ..swap import swapped
from . import call, prop


def same(a, b) -> bool:
    import torch
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a, b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def show(m) -> str:
    s = repr(m)
    return s if len(s) < 240 else s[:237] + "..."


def messages():
    import torch

    from ... import messages as M
    from ...req import SamplingParams
    uid = st.integers(0, 2**40)
    sp = st.builds(SamplingParams, temperature=st.sampled_from([0.0, 0.7]), top_k=st.sampled_from([-1, 5]),
                   max_tokens=st.integers(1, 100), ignore_eos=st.booleans(), seed=st.none() | st.integers(0, 99))
    dtypes = st.sampled_from([(torch.int32, 2**31 - 1), (torch.int64, 2**40), (torch.uint8, 255), (torch.float32, 1000)])
    tensor = st.tuples(dtypes, st.lists(st.integers(0, 255), max_size=12)).map(
        lambda d: torch.tensor([x * (d[0][1] // 255 or 1) for x in d[1]], dtype=d[0][0]))
    chat = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": st.text(max_size=8)}),
                    max_size=2)
    user = st.builds(M.UserMsg, uid=uid, input_ids=tensor, sampling_params=sp)
    tok = st.builds(M.TokenizeMsg, uid=uid, text=st.none() | st.text(max_size=12), messages=st.none() | chat,
                    sampling_params=sp, input_ids=st.none() | st.lists(st.integers(0, 5000), max_size=4))
    detok = st.builds(M.DetokenizeMsg, uid=uid, next_token=st.integers(-1, 50000), finished=st.booleans(),
                      finish_reason=st.sampled_from([None, "stop", "length"]), error=st.none() | st.text(max_size=6))
    small = st.one_of(user, st.builds(M.AbortMsg, uid=uid), st.builds(M.ExitMsg))
    return st.one_of(user, tok, detok, small, st.builds(M.BatchBackendMsg, data=st.lists(small, max_size=3)),
                     st.builds(M.BatchTokenizerMsg, data=st.lists(detok, max_size=3)))


def _classics() -> tuple:
    import torch

    from ... import messages as M
    from ...req import SamplingParams
    sp = SamplingParams(max_tokens=3)
    return (M.UserMsg(1, torch.tensor([5, 6, 7], dtype=torch.int32), sp), M.UserMsg(2, torch.tensor([2**40], dtype=torch.int64), sp),
            M.TokenizeMsg(3, None, [{"role": "user", "content": "hi"}], sp), M.BatchBackendMsg([M.AbortMsg(4), M.ExitMsg()]))


def _zmq_roundtrip(msgs) -> list:
    """Through a real PUSH/PULL pair of the server's queues (ipc:// in a private temp dir)."""
    from ...server.queues import pull, push
    root = tempfile.mkdtemp(prefix="minisgl-ex-")
    try:
        addr = f"ipc://{root}/q"
        inbox, out = pull(addr), push(addr)
        for m in msgs:
            out.put(m)
        got = [inbox.get(5000) for _ in msgs]
        inbox.close(), out.close()
        return got
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _must_refuse(what: str, fn, arg, why: str) -> None:
    from ...messages import MessageError
    try:
        out = fn(arg)
    except MessageError:
        return
    except Exception as e:
        raise Wrong(f"your {what} raised {type(e).__name__} ({e}) for {why}; raise MessageError") from None
    raise Wrong(f"your {what} accepted {why} (it returned {show(out)}); it must raise MessageError")


def grade_encode(ex, path, module) -> None:
    import torch

    from ... import messages as M
    from ...req import SamplingParams

    def check(m):
        raw = call("encode", module.encode, m, on=show(m))
        if not isinstance(raw, bytes):
            raise Wrong(f"your encode returned a {type(raw).__name__} for {show(m)}; it returns bytes")
        try:
            back = M.decode(raw)
        except M.MessageError as e:
            raise Wrong(f"the library's decode cannot read your bytes for {show(m)}: {e}") from None
        if not same(back, m):
            raise Wrong(f"your encode of {show(m)} reads back (library decode) as {show(back)}")

    prop(messages(), check, 80, explicit=_classics())
    sp = SamplingParams()
    _must_refuse("encode", module.encode, M.UserMsg(0, torch.zeros(2, 3, dtype=torch.int32), sp), "a 2-D tensor")
    _must_refuse("encode", module.encode, M.UserMsg(0, torch.zeros(3, dtype=torch.float16), sp), "a float16 tensor")
    _must_refuse("encode", module.encode, dataclasses.make_dataclass("Evil", [("x", int)])(1), "a dataclass not in MESSAGE_TYPES")
    _must_refuse("encode", module.encode, M.TokenizeMsg(0, None, [{"__type__": "x"}], sp), "a dict with a '__type__' key")
    _roundtrip_through_zmq(ex, path)


def grade_decode(ex, path, module) -> None:
    import msgpack

    from ... import messages as M

    def check(m):
        raw = M.encode(m)
        back = call("decode", module.decode, raw, on=f"the library's bytes of {show(m)}")
        if not same(back, m):
            raise Wrong(f"your decode of the library's bytes for {show(m)} gave {show(back)}")

    prop(messages(), check, 80, explicit=_classics())
    pack = lambda d: msgpack.packb(d, use_bin_type=True)
    _must_refuse("decode", module.decode, pack({"__type__": "dataclass"}), "the type name 'dataclass' (not in MESSAGE_TYPES)")
    _must_refuse("decode", module.decode, pack({"__type__": "Req", "uid": 1}), "the type name 'Req' (not in MESSAGE_TYPES)")
    _must_refuse("decode", module.decode, pack({"__type__": "AbortMsg", "uid": 1, "cmd": "rm"}), "an AbortMsg with a field 'cmd' it does not have")
    _must_refuse("decode", module.decode, pack({"__type__": "AbortMsg", "uid": {"__type__": "Tensor", "dtype": "int32",
                                                                                  "buffer": b"\0" * 4, "x": 1}}),
                 "a Tensor with an extra key")
    _must_refuse("decode", module.decode, b"\xc1 not msgpack", "bytes that are not msgpack")
    _must_refuse("decode", module.decode, pack([1, 2]), "a msgpack list (a message is a dict with '__type__')")
    _roundtrip_through_zmq(ex, path)


def _roundtrip_through_zmq(ex, path) -> None:
    import torch

    from ... import messages as M
    from ...req import SamplingParams
    sent = [M.UserMsg(7, torch.arange(5, dtype=torch.int32), SamplingParams(max_tokens=3)),
            M.BatchBackendMsg([M.AbortMsg(3), M.ExitMsg()]), M.DetokenizeMsg(7, 42, True, "stop")]
    with swapped([ex], lambda e: path):
        got = _zmq_roundtrip(sent)
    for a, b in zip(sent, got):
        if not same(a, b):
            raise Wrong(f"through the server's ZMQ queues (with your {ex.name}), {show(a)} arrived as {show(b)}")


def cut_reads(messages: list[bytes], cuts: list[int]) -> list[bytes]:
    """The framed messages as the reads of a stream might return them: cut at `cuts` (positions, any order)."""
    from ...server.queues import frame
    wire = b"".join(frame(m) for m in messages)
    ends = sorted({c % (len(wire) + 1) for c in cuts} | {len(wire)})
    return [wire[a:b] for a, b in zip([0] + ends, ends)]


def short(b: bytes) -> str:
    return repr(b) if len(b) <= 24 else f"{b[:20]!r}... ({len(b)} bytes)"


def grade_feed(ex, path, module) -> None:
    from ...server.queues import Frames

    def check(case):
        messages, cuts = case
        frames, got = Frames(), []
        reads = cut_reads(messages, cuts)
        for i, data in enumerate(reads):
            out = call("feed", module.feed, frames, memoryview(data), on=f"read {i} of {len(reads)}")
            if not isinstance(out, list) or not all(isinstance(m, bytes) for m in out):
                raise Wrong(f"your feed returned {short(repr(out).encode())} for a read; it returns a list of bytes")
            got += out
        if got != messages:
            shown = ", ".join(short(m) for m in messages[:4]) + (", ..." if len(messages) > 4 else "")
            raise Wrong(f"messages [{shown}] in reads of {[len(d) for d in reads]} bytes came out as "
                        f"{len(got)} messages ({', '.join(short(m) for m in got[:4])}); want them whole, in order")

    msgs = st.lists(st.binary(max_size=40), max_size=8)
    prop(st.tuples(msgs, st.lists(st.integers(0, 400), max_size=10)), check, 80,
         explicit=(([b"step 1", b"step 2"], []), ([b"a message read in two"], [9]), ([b"", b"x"], [2])))
    _through_a_socket(ex, path)


def _through_a_socket(ex, path) -> None:
    """Messages through the replies' real wire (push/pull on a unix:// address), read with the reader's feed."""
    from ...server.queues import pull, push
    sent = [b"first", b"", bytes(range(256)) * 4096, b"last"]  # 1 MiB: many reads
    root = tempfile.mkdtemp(prefix="minisgl-ex-")
    try:
        with swapped([ex], lambda e: path):
            inbox, out = pull(f"unix://{root}/q"), push(f"unix://{root}/q")
            for m in sent:
                out.put_raw(m)
            got = [inbox.get_raw(5000) for _ in sent]
            out.close(), inbox.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for a, b in zip(sent, got):
        if a != b:
            raise Wrong(f"through the server's plain socket (with your feed), {short(a)} arrived as "
                        f"{'nothing' if b is None else short(b)}")
