"""encode that forgets the 1-D rule: a 2-D tensor is flattened and sent.

EXPECT: 2-D tensor
"""
from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import torch

from minisgl_edu import messages
from minisgl_edu.messages import _DTYPES, MESSAGE_TYPES, MessageError


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
            v = v.flatten()
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


