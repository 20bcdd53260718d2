"""Chapter 1 — Processes and boundaries: what crosses between the processes, and as which bytes?

Every message is a small dataclass; adding a message type is adding one here and to `MESSAGE_TYPES`,
the only classes the decoder builds. Which boundary each crosses, and the wire format: chapter 1.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import torch

from .req import SamplingParams


# ---- API server -> tokenizer ---------------------------------------------------------------------
@dataclass
class TokenizeMsg:
    uid: int
    text: str | None  # a raw prompt (/v1/completions) ...
    messages: list[dict] | None  # ... or chat messages, to be wrapped in the chat template
    sampling_params: SamplingParams
    input_ids: list[int] | None = None  # a prompt given as token ids: no tokenizer work at all


# ---- tokenizer -> scheduler ----------------------------------------------------------------------
@dataclass
class UserMsg:
    uid: int
    input_ids: torch.Tensor  # CPU 1-D int32: host memory crosses the boundary, never a device tensor
    sampling_params: SamplingParams


@dataclass
class AbortMsg:
    """Forget a request (its client went away or a stop string was hit); frees its pages."""
    uid: int


@dataclass
class StatsMsg:
    """Ask the scheduler for its page counts and an integrity check (a debug query; answered as StatsReply)."""
    uid: int


@dataclass
class ExitMsg:
    """Stop the receiving process's loop (travels the same path as requests, so it comes last)."""


@dataclass
class BatchBackendMsg:
    data: list[UserMsg | AbortMsg | StatsMsg | ExitMsg | RecordMsg | ReportMsg]


# ---- scheduler -> detokenizer --------------------------------------------------------------------
@dataclass
class DetokenizeMsg:
    uid: int
    next_token: int  # -1 when nothing new was produced (an abort or an error)
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    prompt_tokens: int = 0
    clamped: bool = False  # max_tokens was cut to what the context leaves
    error: str | None = None  # why the request was refused (it never ran)
    status: int = 200  # the HTTP status the API should answer an error with
    logprobs: list | None = None  # [chosen logprob, [top ids], [top logprobs]] when the request asked for them


@dataclass
class TokenColumns:
    """A step's plain tokens (each a DetokenizeMsg(uid, token, finished=False) with no extras), one column per
    field: at 256 requests a step is 256 DetokenizeMsgs, and objects cost ~3 us each to build and encode, a
    column ~0.05 us. Tokens that finish a request or carry extras (logprobs, clamped) still travel as DetokenizeMsg."""
    uids: list[int]
    next_tokens: list[int]
    sent: float = 0.0  # when the scheduler handed them out (time.perf_counter: one clock for every process of a host)

    def rows(self) -> list[DetokenizeMsg]:
        return [DetokenizeMsg(u, t, False) for u, t in zip(self.uids, self.next_tokens)]


@dataclass
class StatsReply:
    uid: int
    num_pages: int
    free_pages: int
    cached_pages: int
    live_reqs: int
    integrity: str  # "ok", "busy" (requests in flight: not checked) or the failed assertion
    prefill_tokens: int = 0  # tokens extended by prefill steps so far (chapter 9: n > 1 prefills the prompt once)
    cache_hit_tokens: int = 0  # prompt tokens served from the prefix cache so far


@dataclass
class BatchTokenizerMsg:
    data: list[DetokenizeMsg | TokenColumns | StatsReply | SchedulerStats]


# ---- detokenizer -> API server -------------------------------------------------------------------
@dataclass
class UserReply:
    uid: int
    incremental_output: str  # new text since the last reply (never ends inside a UTF-8 character)
    finished: bool
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    warning: str | None = None
    error: str | None = None
    status: int = 200
    logprobs: list[dict] | None = None  # OpenAI's entries {token, logprob, bytes, top_logprobs} for this token
    output_ids: list[int] | None = None  # --skip-tokenizer-init: the new token ids (incremental_output is "")


@dataclass
class SchedulerStats:
    """The scheduler's gauges and cumulative counters for /metrics: rank 0 sends one every
    STATS_INTERVAL_S while busy and one when it turns idle; the detokenizer passes it on."""
    running: int
    waiting: int
    num_pages: int
    free_pages: int
    evictable_pages: int  # cached and unreferenced: free for the taking
    prefix_queried_tokens: int  # prompt tokens of admitted requests (cumulative)
    prefix_hit_tokens: int  # of which the prefix cache served (cumulative)
    step_bounds: list[float]  # step-time histogram bucket upper bounds, seconds
    step_counts: dict[str, list[int]]  # phase -> cumulative count per bucket (last: +Inf)
    step_sum: dict[str, float]  # phase -> total seconds
    emit_bounds: list[float] = field(default_factory=list)  # emission-interval histogram (token-weighted), seconds
    emit_counts: list[int] = field(default_factory=list)
    emit_sum: float = 0.0
    eager_steps: dict[str, int] = field(default_factory=dict)  # phase -> steps without a CUDA graph (cumulative)


@dataclass
class ReplyColumns:
    """The plain UserReplies of one detokenizer batch (not finished, no warning, error or logprobs), one column
    per field, as TokenColumns is for DetokenizeMsgs. `output_ids` (--skip-tokenizer-init) holds each one's ids."""
    uids: list[int]
    texts: list[str]
    completion_tokens: list[int]
    output_ids: list[list[int]] | None = None
    # the step's way here, on time.perf_counter's clock (shared by a host's processes; 0: not stamped): handed out by
    # the scheduler, received and sent on by the detokenizer. The API adds its receipt (/metrics' reply hops)
    sent: float = 0.0
    detok_in: float = 0.0
    detok_out: float = 0.0

    def rows(self) -> list[UserReply]:
        ids = self.output_ids or [None] * len(self.uids)
        return [UserReply(u, t, False, None, 0, n, output_ids=i)
                for u, t, n, i in zip(self.uids, self.texts, self.completion_tokens, ids)]


def plain_reply(r) -> bool:
    """A UserReply that a ReplyColumns row says all of."""
    return (type(r) is UserReply and not r.finished and r.error is None and r.warning is None and r.logprobs is None
            and r.prompt_tokens == 0 and r.status == 200)


def reply_columns(replies: list) -> list:
    """The plain UserReplies gathered into one ReplyColumns (first), the rest after, in order; a uid's replies
    keep their order (a plain one after another of its uid's that is not plain stays with the rest)."""
    plain, rest, held = [], [], set()
    for r in replies:
        if plain_reply(r) and r.uid not in held:
            plain.append(r)
        else:
            rest.append(r)
            held.add(getattr(r, "uid", None))
    with_ids = [r.output_ids is not None for r in plain]
    if len(plain) < 2 or (any(with_ids) and not all(with_ids)):
        return replies  # nothing to gain, or a mix the columns cannot say
    cols = ReplyColumns([r.uid for r in plain], [r.incremental_output for r in plain],
                        [r.completion_tokens for r in plain], [r.output_ids for r in plain] if with_ids[0] else None)
    return [cols] + rest


@dataclass
class BatchFrontendMsg:
    data: list[UserReply | ReplyColumns | StatsReply | SchedulerStats]


# ---- chapter 8's debugging exchange: what each rank decided (every rank -> the LLM(tp>1) caller) ---
@dataclass
class RecordMsg:
    """Every rank records each step it runs from now on (and its logits: `logits`); `live`: each rank
    also sends each step's record as it starts it (seen even if the rank then hangs or crashes);
    `stop`: recording ends (it syncs the host every step: keep it out of timings)."""
    logits: bool = False
    live: bool = False
    stop: bool = False


@dataclass
class ReportMsg:
    """Every rank answers with a `RankReport` of the steps it recorded since the last one."""


@dataclass
class BatchRecord:
    """One step as a rank saw it: enough to tell whether two ranks made the same decision."""
    phase: str
    uids: tuple[int, ...]
    cached_lens: tuple[int, ...]
    extend_lens: tuple[int, ...]
    out_loc: tuple[int, ...]  # the KV slots this step writes: the page allocations
    tokens: tuple[int, ...] | None = None  # sampled this step (None: the forward did not finish)
    rank: int = field(default=0, compare=False)  # who saw it: records compare equal across ranks

    def __post_init__(self):  # lists off the wire become tuples again: records compare equal across ranks
        for f in ("uids", "cached_lens", "extend_lens", "out_loc", "tokens"):
            if isinstance(getattr(self, f), list):
                setattr(self, f, tuple(getattr(self, f)))


@dataclass
class RankReport:
    rank: int
    device: str
    shard_shapes: dict[str, tuple[int, ...]]
    records: list[BatchRecord]
    flat_logits: list[torch.Tensor]  # each recorded step's logits, flattened: only 1-D tensors cross
    vocab: int = 1

    def __post_init__(self):
        self.shard_shapes = {n: tuple(s) for n, s in self.shard_shapes.items()}

    @property
    def logits(self) -> list[torch.Tensor]:
        """Each recorded step's [sampled rows, vocab] logits."""
        return [t.view(-1, self.vocab) for t in self.flat_logits]


# ---- process start-up ----------------------------------------------------------------------------
@dataclass
class AckMsg:
    """A worker's 'ready' (or its start-up failure) on the launcher's ack queue."""
    name: str
    pid: int
    error: str | None = None


MESSAGE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    SamplingParams, TokenizeMsg, UserMsg, AbortMsg, StatsMsg, ExitMsg, BatchBackendMsg, DetokenizeMsg,
    StatsReply, BatchTokenizerMsg, UserReply, BatchFrontendMsg, RecordMsg, ReportMsg, BatchRecord, RankReport,
    AckMsg, SchedulerStats, TokenColumns, ReplyColumns)}

# dtypes a boundary may carry (numpy must hold them, so no bfloat16): token ids, and floats for debugging
_DTYPES = {str(d).removeprefix("torch."): d for d in (torch.int32, torch.int64, torch.float32, torch.uint8)}


class MessageError(ValueError):
    """Bytes or an object that are not a valid message."""


_PLAIN = frozenset((bool, int, float, str, bytes, type(None)))  # exact types: the common case, checked first
_FIELDS: dict[type, tuple[str, ...]] = {}  # message class -> its field names (dataclasses.fields is slow per call)
_FIELD_SETS: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _to_wire(v: Any) -> Any:
    if type(v) in _PLAIN:  # most fields of most messages: one set lookup (a token costs ~10 of these per hop)
        return v
    if isinstance(v, torch.Tensor):
        if v.dim() != 1:
            raise MessageError(f"only 1-D tensors cross a process boundary, got shape {tuple(v.shape)}")
        if v.device.type != "cpu":
            raise MessageError(f"only CPU tensors cross a process boundary, got one on {v.device}")
        dtype = str(v.dtype).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise MessageError(f"tensor dtype {dtype} cannot cross a boundary (allowed: {sorted(_DTYPES)})")
        return {"__type__": "Tensor", "dtype": dtype, "buffer": v.contiguous().numpy().tobytes()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        name = type(v).__name__
        if MESSAGE_TYPES.get(name) is not type(v):
            raise MessageError(f"{name} is not a message type (add it to MESSAGE_TYPES)")
        out = {"__type__": name}
        for k in _field_names(type(v)):
            x = getattr(v, k)
            out[k] = x if type(x) in _PLAIN else _to_wire(x)
        return out
    if isinstance(v, (list, tuple)):
        return [x if type(x) in _PLAIN else _to_wire(x) for x in v]
    if isinstance(v, dict):
        if "__type__" in v or not all(isinstance(k, str) for k in v):
            raise MessageError("a plain dict in a message needs string keys and no '__type__' key")
        return {k: _to_wire(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    raise MessageError(f"cannot send a {type(v).__name__} across a boundary")


def _from_wire(v: Any) -> Any:
    if type(v) in _PLAIN:
        return v
    if isinstance(v, list):
        return [x if type(x) in _PLAIN else _from_wire(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "__type__" not in v:
        return {k: _from_wire(x) for k, x in v.items()}
    name = v["__type__"]
    if name == "Tensor":
        if set(v) != {"__type__", "dtype", "buffer"} or v["dtype"] not in _DTYPES:
            raise MessageError(f"malformed tensor (a 1-D tensor has exactly dtype and buffer): {sorted(v)}")
        dtype = _DTYPES[v["dtype"]]
        return torch.from_numpy(np.frombuffer(v["buffer"], dtype=str(dtype).removeprefix("torch.")).copy())
    cls = MESSAGE_TYPES.get(name)
    if cls is None:
        raise MessageError(f"unknown message type {name!r}")
    kwargs = {k: x if type(x) in _PLAIN else _from_wire(x) for k, x in v.items() if k != "__type__"}
    names = _FIELD_SETS.get(cls) or _FIELD_SETS.setdefault(cls, frozenset(_field_names(cls)))
    if not kwargs.keys() <= names:
        raise MessageError(f"{name} has no field(s) {sorted(kwargs.keys() - names)}")
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise MessageError(f"malformed {name}: {e}") from None


def encode(msg: Any) -> bytes:
    """A message dataclass -> bytes on the wire."""
    return msgpack.packb(_to_wire(msg), use_bin_type=True)


def decode(raw: bytes) -> Any:
    """Bytes from the wire -> a message dataclass (only types in MESSAGE_TYPES; else MessageError)."""
    try:
        obj = msgpack.unpackb(raw, raw=False)
    except Exception as e:
        raise MessageError(f"not a msgpack message: {e}") from None
    if not isinstance(obj, dict) or "__type__" not in obj:
        raise MessageError("a message is a dict with a '__type__' key")
    return _from_wire(obj)


def unbatch(msg: Any) -> list:
    """A batch wrapper -> its messages; any other message -> [it]."""
    return list(msg.data) if isinstance(msg, (BatchBackendMsg, BatchTokenizerMsg, BatchFrontendMsg)) else [msg]


def unbatch_rows(msg: Any) -> list:
    """unbatch, with each TokenColumns / ReplyColumns expanded into its DetokenizeMsgs / UserReplies."""
    return [r for m in unbatch(msg) for r in (m.rows() if isinstance(m, (TokenColumns, ReplyColumns)) else (m,))]
