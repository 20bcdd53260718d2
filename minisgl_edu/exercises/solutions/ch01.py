"""Chapter 1 exercises — what crosses a process boundary. Write each function, then grade it:

    python -m minisgl_edu.exercises check 01

`encode` replaces `minisgl_edu.messages.encode` and `decode` replaces `messages.decode` (and the
queues' imports of them: every ZMQ socket of the server). The grader round-trips random messages
between your function and the library's (so your bytes are the library's wire format), checks the
refusals (2-D tensors, unknown types, unknown fields), then sends messages through real ZMQ sockets.
"""
from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import torch

from minisgl_edu.exercises import NotAttempted  # noqa: F401  (the stub raises it)
from minisgl_edu.messages import _DTYPES, MESSAGE_TYPES, MessageError  # noqa: F401  (name -> class; dtype name -> dtype)


def encode(msg) -> bytes:
    """A message dataclass -> bytes on the wire: msgpack.packb(wire form, use_bin_type=True).

    The wire form, recursively: a message dataclass -> {"__type__": class name, field: wire form of
    the field, ...} (only classes in MESSAGE_TYPES: else MessageError); a torch tensor ->
    {"__type__": "Tensor", "dtype": "int32" (the dtype's name without "torch."), "buffer": raw bytes},
    and only a 1-D CPU tensor of a dtype in _DTYPES may cross (else MessageError); lists and tuples
    -> lists; a dict -> a dict (string keys, no "__type__" key: else MessageError); None, bool,
    int, float, str, bytes as they are; anything else -> MessageError."""
    def wire(v):
        if isinstance(v, torch.Tensor):
            if v.dim() != 1:
                raise MessageError(f"only 1-D tensors cross a process boundary, got shape {tuple(v.shape)}")
            if v.device.type != "cpu":
                raise MessageError(f"only CPU tensors cross a process boundary, got one on {v.device}")
            dtype = str(v.dtype).removeprefix("torch.")
            if dtype not in _DTYPES:
                raise MessageError(f"tensor dtype {dtype} cannot cross a boundary")
            return {"__type__": "Tensor", "dtype": dtype, "buffer": v.contiguous().numpy().tobytes()}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            name = type(v).__name__
            if MESSAGE_TYPES.get(name) is not type(v):
                raise MessageError(f"{name} is not a message type")
            return {"__type__": name, **{f.name: wire(getattr(v, f.name)) for f in dataclasses.fields(v)}}
        if isinstance(v, (list, tuple)):
            return [wire(x) for x in v]
        if isinstance(v, dict):
            if "__type__" in v or not all(isinstance(k, str) for k in v):
                raise MessageError("a plain dict in a message needs string keys and no '__type__' key")
            return {k: wire(x) for k, x in v.items()}
        if v is None or isinstance(v, (bool, int, float, str, bytes)):
            return v
        raise MessageError(f"cannot send a {type(v).__name__} across a boundary")
    return msgpack.packb(wire(msg), use_bin_type=True)


def decode(raw: bytes):
    """Bytes from the wire -> a message dataclass: the inverse of encode, and a careful one. It builds
    only the classes in MESSAGE_TYPES (an unknown "__type__" is a MessageError, never a lookup
    anywhere else), a Tensor only from exactly {"__type__", "dtype", "buffer"} with a dtype in
    _DTYPES (a fresh, writable tensor: copy the buffer), and a class only from fields it has. Bytes
    that are not msgpack, or not a dict with "__type__" at the top, are a MessageError too."""
    def unwire(v):
        if isinstance(v, list):
            return [unwire(x) for x in v]
        if not isinstance(v, dict):
            return v
        if "__type__" not in v:
            return {k: unwire(x) for k, x in v.items()}
        name = v["__type__"]
        if name == "Tensor":
            if set(v) != {"__type__", "dtype", "buffer"} or v["dtype"] not in _DTYPES:
                raise MessageError(f"malformed tensor: {sorted(v)}")
            return torch.from_numpy(np.frombuffer(v["buffer"], dtype=v["dtype"]).copy())
        cls = MESSAGE_TYPES.get(name)
        if cls is None:
            raise MessageError(f"unknown message type {name!r}")
        kwargs = {k: unwire(x) for k, x in v.items() if k != "__type__"}
        extra = set(kwargs) - {f.name for f in dataclasses.fields(cls)}
        if extra:
            raise MessageError(f"{name} has no field(s) {sorted(extra)}")
        try:
            return cls(**kwargs)
        except TypeError as e:  # a required field is missing
            raise MessageError(f"malformed {name}: {e}") from None
    try:
        obj = msgpack.unpackb(raw, raw=False)
    except Exception as e:
        raise MessageError(f"not a msgpack message: {e}") from None
    if not isinstance(obj, dict) or "__type__" not in obj:
        raise MessageError("a message is a dict with a '__type__' key")
    return unwire(obj)
