"""decode that silently drops fields the class does not have.

EXPECT: field 'cmd'
"""
from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import torch

from minisgl_edu import messages
from minisgl_edu.messages import _DTYPES, MESSAGE_TYPES, MessageError


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
        kwargs = {k: x for k, x in kwargs.items() if k not in extra}
        if False:
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
