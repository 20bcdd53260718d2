"""Chapter 9 — the API server: HTTP in, a TokenizeMsg out; UserReplies in, JSON or SSE out.

A handler registers a queue for its uid, sends one TokenizeMsg to `Addresses.tokenizer_of(uid)`
(chapter 1: so an AbortMsg never overtakes it) and reads the queue that `Frontend.dispatch` fills.
The bodies are in `protocol.py`; the status code of each refusal is chapter 9's "Bad requests" table.
"""
from __future__ import annotations

import asyncio
import collections
import hmac
import itertools
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from typing import AsyncIterator

import zmq
import zmq.asyncio
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..messages import (AbortMsg, ReplyColumns, SchedulerStats, StatsMsg, StatsReply, TokenizeMsg, UserReply, decode,
                        encode, plain_reply, unbatch, unbatch_rows)
from ..req import SamplingParams
from .common import ServerConfig, freeze_startup_objects, trace
from .protocol import (APIError, ChatRequest, CommonParams, CompletionRequest, DetokenizeRequest, TokenizeRequest,
                       chat_prompt, chunk_body, completion_prompt, error_body, model_card, response_body,
                       sampling_params, usage_chunk)
from .metrics import ServerMetrics
from .queues import Addresses, Frames

log = logging.getLogger("minisgl_edu")

MAX_BODY_BYTES = 16 << 20


def error_json(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, param), status)


# ---- stop strings --------------------------------------------------------------------------------
@dataclass
class StopStrings:
    """Cut the output at the first stop string (excluded); hold back a tail that might begin one."""
    stops: list[str]
    held: str = ""

    def __post_init__(self) -> None:
        self.stops = list(dict.fromkeys(self.stops))  # 1000 copies of one stop string are one stop string

    def feed(self, text: str, final: bool) -> tuple[str, bool]:
        self.held += text
        hits = [i for i in (self.held.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.held = self.held[:min(hits)], ""
            return out, True
        # hold back the longest tail that could still grow into a stop string
        keep = 0 if final else max((k for s in self.stops for k in range(1, min(len(s), len(self.held) + 1))
                                    if self.held.endswith(s[:k])), default=0)  # a tail is never longer than held
        cut = len(self.held) - keep
        out, self.held = self.held[:cut], self.held[cut:]
        return out, False


# ---- the link to the workers ---------------------------------------------------------------------
DISCONNECT_CHECK_S = 0.5  # how often a request waiting for its next reply looks whether its client is still there


class Inbox:
    """One request's replies as they arrive, and the future its reader sleeps on: an asyncio.Queue read through
    wait_for(timeout) costs a task and a timer per wait, per token; this costs one future (the timeout is
    Frontend.tick's, shared by all)."""
    __slots__ = ("items", "waiter", "direct")

    def __init__(self):
        self.items: collections.deque = collections.deque()
        self.waiter: asyncio.Future | None = None
        self.direct = None  # a stream's writer of plain replies (`direct_writer`), set as its response starts

    def put_nowait(self, reply) -> None:
        self.items.append(reply)
        self.wake()

    def offer(self, reply) -> bool:
        """A reply for this request: written to its socket at once (True) when its reader sleeps with nothing queued
        and `direct` takes it (no task wakes for it), else queued; what is queued keeps its order ahead of any write."""
        if self.direct is not None and self.waiter is not None and not self.items and self.direct(reply):
            return True
        self.put_nowait(reply)
        return False

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def empty(self) -> bool:
        return not self.items

    def get_nowait(self):
        return self.items.popleft()

    async def wait(self) -> None:
        """Until a reply arrives or the next tick."""
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def get(self):
        while not self.items:
            await self.wait()
        return self.items.popleft()


class Frontend:
    """The API server's end of the pipes: sends to the tokenizers, receives from the detokenizer."""

    def __init__(self, addrs: Addresses, cfg: ServerConfig):
        self.addrs, self.cfg = addrs, cfg
        ctx = zmq.Context.instance()
        self.to_tokenizers = []
        for i in range(addrs.num_tokenizers):
            s = ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(addrs.tokenizer(i))
            self.to_tokenizers.append(s)
        self.uids = itertools.count()
        self.queues: dict[int, asyncio.Queue] = {}
        self.dead: str | None = None  # set by the launcher's watchdog when a worker dies
        self.pids: dict[str, int] = {}  # worker name -> pid, shown by /health
        self.loop: asyncio.AbstractEventLoop | None = None
        self.metrics = ServerMetrics(cfg.served_name)  # /metrics: fed here, as replies arrive

    def send(self, msg) -> None:
        # a plain (blocking-API) PUSH: it queues without waiting, so it is safe in a cancelled handler too
        trace(self.cfg, "api", f"send {type(msg).__name__}", [msg.uid])
        self.to_tokenizers[self.addrs.tokenizer_of(msg.uid)].send(encode(msg))

    def new_uid(self) -> int:
        return next(self.uids)

    def open(self, uid: int) -> asyncio.Queue | Inbox:
        """Register the queue the replies for `uid` will land in (--naive-stream: an asyncio.Queue)."""
        self.queues[uid] = asyncio.Queue() if self.cfg.naive_stream else Inbox()
        return self.queues[uid]

    def close(self, uid: int, abort: bool) -> None:
        if self.queues.pop(uid, None) is not None and abort and self.dead is None:
            self.send(AbortMsg(uid))  # frees the request's pages in the scheduler

    async def listen(self) -> None:
        """Receive the replies until cancelled: over a plain socket (`unix://`, the default), each read is dispatched
        from the loop's own read callback (`FrameReader`), no task in between; over ZMQ, by this task."""
        addr = self.addrs.frontend
        if not addr.startswith("unix://"):
            return await self.listen_zmq(addr)
        server = await asyncio.get_running_loop().create_unix_server(lambda: FrameReader(self.dispatch),
                                                                     addr.removeprefix("unix://"))
        try:
            await asyncio.Event().wait()  # until cancelled at shutdown
        finally:
            server.close()

    async def listen_zmq(self, addr: str) -> None:
        sock = zmq.asyncio.Context.instance().socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(addr)
        try:
            while True:
                raws = [await sock.recv()]
                while not self.cfg.naive_stream and sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    raws.append(await sock.recv())  # a backlog: every request wakes once for all of it
                self.dispatch(raws)
        finally:
            sock.close(linger=0)

    def dispatch(self, raws: list[bytes]) -> None:
        """One wake-up's messages to their requests' queues (or straight to their streams)."""
        replies = self.observe([m for raw in raws for m in unbatch(decode(raw))])
        if self.cfg.hop_log:
            trace(self.cfg, "api", "recv UserReply", [r.uid for r in replies if isinstance(r, UserReply)])
        for reply in replies:
            q = self.queues.get(reply.uid)
            if q is None:  # replies of aborted requests find no queue
                continue
            if isinstance(q, Inbox):  # a plain token of a sleeping stream: written out here
                self.metrics.direct_writes += q.offer(reply)
            else:
                q.put_nowait(reply)

    def observe(self, msgs: list) -> list:
        """Feed /metrics as messages arrive (a step's ReplyColumns: the hops of its way, then each row's latency and
        tokens; the scheduler's SchedulerStats, which are for us alone and are taken out); return the replies that
        go to a request's queue, the columns expanded into UserReplies."""
        now, out = time.perf_counter(), []
        for m in msgs:
            if isinstance(m, SchedulerStats):
                self.metrics.sched = m
                continue
            if type(m) is ReplyColumns:
                self.metrics.on_hops(m, now)
            for reply in unbatch_rows(m):
                if isinstance(reply, UserReply):
                    self.metrics.on_reply(reply, now)
                out.append(reply)
        return out

    async def tick(self) -> None:
        """Wake every waiting request every DISCONNECT_CHECK_S, to look whether its client has gone."""
        while True:
            await asyncio.sleep(DISCONNECT_CHECK_S)
            for q in list(self.queues.values()):
                if isinstance(q, Inbox):
                    q.wake()

    def close_sockets(self) -> None:
        for s in self.to_tokenizers:
            s.close(linger=0)

    def fail_all(self, reason: str) -> None:
        """A worker died: /health fails and every waiting request gets an error (call in the loop's thread)."""
        self.dead = reason
        for uid, q in list(self.queues.items()):
            q.put_nowait(UserReply(uid, "", True, "error", error=reason, status=503))


class FrameReader(asyncio.Protocol):
    """One sender's connection to the API's `unix://` inbox: the loop calls `data_received` with each read, and the
    whole messages in it go to `dispatch` at once. An error there is logged and the connection kept: a closed one
    would silence that sender for good."""

    def __init__(self, dispatch):
        self.dispatch, self.frames = dispatch, Frames()

    def data_received(self, data: bytes) -> None:
        if raws := self.frames.feed(data):
            try:
                self.dispatch(raws)
            except Exception:
                log.exception("dispatching %d replies failed", len(raws))


async def next_reply(q: asyncio.Queue | Inbox, request: Request, coalesce: bool = True):
    """The next reply for this request; None if the client has gone away meanwhile. With `coalesce`, every
    reply already waiting is merged into it: one SSE event for what arrived while we were busy."""
    if isinstance(q, Inbox):
        while q.empty():
            await q.wait()  # a reply, or Frontend.tick
            if q.empty() and await request.is_disconnected():
                return None
        reply = q.get_nowait()
    else:
        while q.empty():  # the naive twin: wait_for costs a task per call
            try:
                reply = await asyncio.wait_for(q.get(), timeout=DISCONNECT_CHECK_S)
                break
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return None
        else:
            reply = q.get_nowait()
    while coalesce and not q.empty() and not reply.finished and isinstance(reply, UserReply):
        reply = merge_replies(reply, q.get_nowait())
    return reply


def merge_replies(a: UserReply, b: UserReply) -> UserReply:
    """Two consecutive replies of one request as one (b is the later)."""
    ids = (a.output_ids or []) + (b.output_ids or []) if a.output_ids is not None or b.output_ids is not None \
        else None
    logprobs = (a.logprobs or []) + (b.logprobs or []) if a.logprobs is not None or b.logprobs is not None \
        else None
    return UserReply(a.uid, a.incremental_output + b.incremental_output, b.finished, b.finish_reason,
                     b.prompt_tokens or a.prompt_tokens, b.completion_tokens, a.warning or b.warning, b.error,
                     b.status, logprobs=logprobs, output_ids=ids)


class BodyLimit:
    """413 for a body over MAX_BODY_BYTES, declared (Content-Length) or counted as it arrives (chunked).
    Plain ASGI: FastAPI's `@app.middleware("http")` wraps `receive` so that a streaming handler would see
    a false client disconnect."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        size = dict(scope.get("headers", [])).get(b"content-length", b"")
        if size.isdigit() and int(size) > MAX_BODY_BYTES:
            return await error_json(413, f"the body exceeds {MAX_BODY_BYTES} bytes", "body_too_large")(scope, receive,
                                                                                                     send)
        received = 0

        async def counted_receive():
            nonlocal received
            msg = await receive()
            received += len(msg.get("body", b""))
            if received > MAX_BODY_BYTES:  # FastAPI turns this into our 413 JSON while it reads the body
                raise HTTPException(413, f"the body exceeds {MAX_BODY_BYTES} bytes")
            return msg
        await self.app(scope, counted_receive, send)


# ---- the app ------------------------------------------------------------------------------------
def create_app(cfg: ServerConfig, frontend: Frontend) -> FastAPI:
    """The FastAPI app: error handlers, the body limit and the routes; the state sits on `app.state`."""
    app = FastAPI(title="minisgl-edu", lifespan=lifespan)
    app.state.cfg, app.state.frontend = cfg, frontend
    app.state.tokenizer, app.state.tokenizer_lock = None, asyncio.Lock()
    app.state.context_length = context_length(cfg)
    app.add_exception_handler(APIError, lambda request, e: error_json(e.status, e.message, e.code, e.param))
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(StarletteHTTPException, lambda request, e: error_json(e.status_code, str(e.detail)))
    app.add_middleware(BodyLimit)
    guarded = [Depends(check_key)]
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", models, methods=["GET"], dependencies=guarded)
    app.add_api_route("/v1/models/{model:path}", model_info, methods=["GET"], dependencies=guarded)
    app.add_api_route("/debug/stats", debug_stats, methods=["GET"], dependencies=guarded)
    app.add_api_route("/v1/chat/completions", chat, methods=["POST"], dependencies=guarded)
    app.add_api_route("/v1/completions", completions, methods=["POST"], dependencies=guarded)
    app.add_api_route("/tokenize", tokenize, methods=["POST"], dependencies=guarded)
    app.add_api_route("/detokenize", detokenize, methods=["POST"], dependencies=guarded)
    app.add_api_route("/metrics", metrics, methods=["GET"])
    return app


def context_length(cfg: ServerConfig) -> int | None:
    """What /tokenize reports as max_model_len: --max-seq-len, else the model's config."""
    try:
        with open(os.path.join(cfg.model_path, "config.json")) as f:
            n = json.load(f).get("max_position_embeddings")
    except OSError:
        n = None
    return min(x for x in (cfg.max_seq_len, n) if x) if (cfg.max_seq_len or n) else None


@asynccontextmanager
async def lifespan(app: FastAPI):
    frontend: Frontend = app.state.frontend
    frontend.loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(frontend.listen()), asyncio.create_task(frontend.tick())]
    freeze_startup_objects("api", frontend.cfg.gc_threshold)  # FastAPI's routes, pydantic's models: never scanned again
    yield
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)  # listen's `finally` closes the socket


RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_long", "too_short",
                "literal_error", "enum"}


def field_path(loc: tuple) -> str:
    """('body', 'stop', 'list[str]') -> 'stop': the request's own field names, without pydantic's union tags."""
    return ".".join(str(x) for x in loc[1:] if isinstance(x, int) or str(x).isidentifier())


async def invalid_body(request: Request, e: RequestValidationError) -> JSONResponse:
    """400 for bad JSON, an unknown field or a value out of the spec's range; 422 for a wrong shape."""
    errs = e.errors()
    first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
    if any(err.get("type") == "json_invalid" for err in errs):
        return error_json(400, f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}".strip(),
                          "invalid_json")
    for err in errs:
        param = field_path(err["loc"])
        if err.get("type") == "extra_forbidden":
            return error_json(400, f"unknown field {param!r}: not an OpenAI field nor one of this server's "
                              "extensions (see chapter 9)", "unknown_parameter", param)
        if err.get("type") in RANGE_ERRORS:
            return error_json(400, f"{param}: {err['msg']}", "invalid_value", param)
    param = field_path(first["loc"])
    return error_json(422, f"{param or 'body'}: {first['msg']}", "invalid_type", param or None)


async def check_key(request: Request) -> None:  # async: FastAPI runs a plain `def` dependency on a worker thread
    cfg: ServerConfig = request.app.state.cfg
    if cfg.api_key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), cfg.api_key.encode()):
        raise APIError(401, "missing or wrong API key (send Authorization: Bearer KEY)", "invalid_api_key")


def check_model(request: Request, model: str | None) -> None:
    cfg: ServerConfig = request.app.state.cfg
    if model is not None and model not in (cfg.served_name, cfg.model_path):
        raise APIError(404, f"model {model!r} is not served here (try {cfg.served_name!r})", "model_not_found",
                       "model")
    if request.app.state.frontend.dead:
        raise APIError(503, f"the server is going down: {request.app.state.frontend.dead}", "worker_died")


async def health(request: Request):
    frontend: Frontend = request.app.state.frontend
    if frontend.dead:
        return JSONResponse({"status": "unhealthy", "reason": frontend.dead}, 503)
    return {"status": "ok", "workers": frontend.pids, "pid": os.getpid()}  # pid: the API process (bench's CPU report)


async def models(request: Request):
    return {"object": "list", "data": [model_card(request.app.state.cfg.served_name)]}


async def model_info(model: str, request: Request):
    check_model(request, model)
    return model_card(request.app.state.cfg.served_name)


async def debug_stats(request: Request):
    """The scheduler's page counts and integrity check (asked through the same pipes as requests)."""
    frontend: Frontend = request.app.state.frontend
    uid = frontend.new_uid()
    q = frontend.open(uid)
    frontend.send(StatsMsg(uid))
    try:
        reply = await asyncio.wait_for(q.get(), timeout=30)
    finally:
        frontend.close(uid, abort=False)
    if not isinstance(reply, StatsReply):
        raise APIError(503, reply.error or "no stats", "worker_died")
    return asdict(reply)


async def metrics(request: Request):
    """Prometheus text format (server/metrics.py): latency histograms, token counters, scheduler gauges."""
    try:
        body = request.app.state.frontend.metrics.render()
    except ImportError:
        raise APIError(503, "/metrics needs the prometheus_client package", "metrics_unavailable") from None
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


async def chat(body: ChatRequest, request: Request):
    check_model(request, body.model)
    if request.app.state.cfg.skip_tokenizer_init:
        raise APIError(400, "chat needs a tokenizer, and this server runs with --skip-tokenizer-init: send "
                       "token ids to /v1/completions", "unsupported_parameter", "messages")
    messages = chat_prompt(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", "invalid_value", "top_logprobs")
    sp = sampling_params(body, body.max_completion_tokens if body.max_tokens is None else body.max_tokens,
                         (body.top_logprobs or 0) if body.logprobs else None)
    return await respond(request, body, lambda uid, sp: TokenizeMsg(uid, None, messages, sp), sp, chat=True)


async def completions(body: CompletionRequest, request: Request):
    check_model(request, body.model)
    prompt = completion_prompt(body)
    if request.app.state.cfg.skip_tokenizer_init and (isinstance(prompt, str) or body.stop):
        raise APIError(400, "this server runs with --skip-tokenizer-init: the prompt must be token ids and "
                       "stop strings cannot be matched", "unsupported_parameter",
                       "prompt" if isinstance(prompt, str) else "stop")
    sp = sampling_params(body, body.max_tokens, body.logprobs)
    text, ids = (prompt, None) if isinstance(prompt, str) else (None, prompt)
    return await respond(request, body, lambda uid, sp: TokenizeMsg(uid, text, None, sp, ids), sp, chat=False)


async def tokenizer_of(request: Request):
    """The API process's own tokenizer, loaded on the first /tokenize or /detokenize (off the event loop)."""
    state = request.app.state
    async with state.tokenizer_lock:
        if state.tokenizer is None:
            from transformers import AutoTokenizer
            state.tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, state.cfg.model_path)
    return state.tokenizer


async def tokenize(body: TokenizeRequest, request: Request):
    """vLLM's and SGLang's /tokenize: the token ids (and their text) of a prompt or of chat messages."""
    check_model(request, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "send exactly one of prompt and messages", "invalid_value", "prompt")
    tok = await tokenizer_of(request)
    messages = None if body.messages is None else [m.as_dict() for m in body.messages]
    try:
        if messages is not None:
            ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=body.add_generation_prompt)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        else:
            ids = tok.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    except Exception as e:  # a template that rejects the roles
        raise APIError(400, f"cannot tokenize: {e}", "invalid_value") from None
    return {"count": len(ids), "max_model_len": request.app.state.context_length, "tokens": ids,
            "token_strs": tok.convert_ids_to_tokens(ids)}


async def detokenize(body: DetokenizeRequest, request: Request):
    check_model(request, body.model)
    tok = await tokenizer_of(request)
    if not all(0 <= t < len(tok) for t in body.tokens):
        raise APIError(400, f"token ids must lie in [0, {len(tok)})", "invalid_value", "tokens")
    return {"prompt": tok.decode(body.tokens)}


PARAM_OF = {"json_schema": "response_format"}  # SamplingParams' name -> the request's field


async def submit(frontend: Frontend, msg: TokenizeMsg, request: Request) -> tuple[asyncio.Queue, UserReply]:
    """Send a request under its uid and wait for its first reply (a refusal gets its status code)."""
    q = frontend.open(msg.uid)
    frontend.metrics.opened(msg.uid)  # TTFT and end-to-end latency count from here
    try:
        frontend.send(msg)
    except (OverflowError, ValueError) as e:  # msgpack: ints beyond 64 bits, strings with lone surrogates
        frontend.close(msg.uid, abort=False)
        frontend.metrics.forget(msg.uid)
        raise APIError(400, f"the request cannot be encoded: {e}", "invalid_value") from None
    first = await next_reply(q, request, not frontend.cfg.naive_stream)  # the client waits for the first token
    if first is None:
        frontend.close(msg.uid, abort=True)
        frontend.metrics.forget(msg.uid)
        raise APIError(499, "the client went away")
    if first.error is not None:
        frontend.close(msg.uid, abort=False)
        frontend.metrics.forget(msg.uid)
        field = first.error.split()[0]  # SamplingParams.validate's messages start with the field's name
        param = None if field not in SamplingParams.__dataclass_fields__ else PARAM_OF.get(field, field)
        raise APIError(first.status, first.error, "context_length_exceeded" if first.status == 413 else
                       "invalid_request", param)
    return q, first


async def prefill_once(frontend: Frontend, make_msg, sp: SamplingParams, request: Request) -> None:
    """n > 1: one request of one token puts the prompt's KV into the radix cache; the n samples then match
    it and compute only the last prompt token each (chapter 5)."""
    uid = frontend.new_uid()
    q, reply = await submit(frontend, make_msg(uid, replace(sp, max_tokens=1, min_tokens=0, logprobs=None)), request)
    try:
        while not reply.finished:
            reply = await next_reply(q, request)
            if reply is None or reply.error is not None:
                raise APIError(503 if reply else 499, reply.error if reply else "the client went away")
    finally:
        frontend.close(uid, abort=reply is None or not reply.finished)


async def start_choices(frontend: Frontend, make_msg, sp: SamplingParams, n: int, request: Request) -> list:
    """(uid, queue, first reply) of each of the n choices; sample i of a seeded request uses seed + i."""
    if n > 1:
        await prefill_once(frontend, make_msg, sp, request)
    started = []
    try:
        for i in range(n):
            uid = frontend.new_uid()
            seed = None if sp.seed is None else sp.seed + i
            started.append((uid, *await submit(frontend, make_msg(uid, replace(sp, seed=seed)), request)))
    except BaseException:
        for uid, _, _ in started:
            frontend.close(uid, abort=True)
        raise
    return started


async def respond(request: Request, body: CommonParams, make_msg, sp: SamplingParams, chat: bool):
    cfg, frontend = request.app.state.cfg, request.app.state.frontend
    started = await start_choices(frontend, make_msg, sp, body.n or 1, request)
    first = started[0][2]
    headers = {"x-minisgl-warning": first.warning} if first.warning else {}
    meta = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{started[0][0]}", "created": int(time.time()),
            "model": cfg.served_name}
    streams = [stream_replies(frontend, uid, q, f, StopStrings(body.stops), request) for uid, q, f in started]
    if body.stream:  # text chunks through a ChunkTemplate per choice (not --naive-stream)
        templates = [None if cfg.naive_stream else ChunkTemplate.of(meta, chat, i, cfg.skip_tokenizer_init)
                     for i in range(len(streams))]
        # one choice, no stop strings, no logprobs: its plain tokens can skip its task (chapter 9, "a write without a wake-up")
        direct = cfg.direct_write and len(started) == 1 and not body.stops and sp.logprobs is None
        events = sse(merge(streams), meta, chat, body.include_usage, templates)
        return SSEResponse(events, started[0][1], templates[0] if direct else None, media_type="text/event-stream",
                           headers=headers)
    choices = await asyncio.gather(*(collect(s) for s in streams))
    dead = next((c[2] for c in choices if c[2].error is not None), None)
    if dead is not None:
        return error_json(dead.status, dead.error, "worker_died")
    out = response_body(meta, chat, [c[:3] for c in choices], first.warning, sp.logprobs is not None)
    if cfg.skip_tokenizer_init:  # no tokenizer: the output is token ids, the text stays empty
        for choice, c in zip(out["choices"], choices):
            choice["token_ids"] = c[3]
    return JSONResponse(out, headers=headers)


async def collect(replies) -> tuple[str, list[dict], UserReply, list[int]]:
    """A choice's whole text, its logprob entries, its last reply and (--skip-tokenizer-init) its token ids."""
    text, logprobs, last, ids = [], [], None, []
    async for piece, last in replies:
        text.append(piece)
        logprobs.extend(last.logprobs or [])
        ids += last.output_ids or []
    return "".join(text), logprobs, last, ids


async def merge(streams: list) -> AsyncIterator[tuple[int, str, UserReply]]:
    """(choice index, text, reply) from n streams as they arrive; one stream is read directly."""
    if len(streams) == 1:
        async for text, reply in streams[0]:
            yield 0, text, reply
        return
    q: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, replies) -> None:
        try:
            async for text, reply in replies:
                await q.put((i, text, reply))
        finally:
            await q.put(None)
    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        for _ in range(len(streams)):
            while (item := await q.get()) is not None:
                yield item
    finally:
        for t in tasks:
            t.cancel()


async def stream_replies(frontend: Frontend, uid: int, q: asyncio.Queue, first: UserReply, stops: StopStrings,
                         request: Request) -> AsyncIterator[tuple[str, UserReply]]:
    """(new text, its reply) until the request finishes; aborts it if we stop early or the client leaves."""
    reply, engine_done = first, False
    try:
        while True:
            engine_done = reply.finished  # the scheduler has let go of it
            text, stopped = reply.incremental_output, False
            if stops.stops:
                text, stopped = stops.feed(text, reply.finished)
            if stopped:
                reply.finished, reply.finish_reason = True, "stop"
            yield text, reply
            if reply.finished:
                return
            reply = await next_reply(q, request, not frontend.cfg.naive_stream)
            if reply is None:
                return
    finally:
        frontend.close(uid, abort=not engine_done)  # a stop string, a gone client: free its pages


def event(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


TEXT_MARK, IDS_MARK = "\x00text\x00", "\x00ids\x00"  # placeholders no server-made id or name holds


@dataclass
class ChunkTemplate:
    """A choice's text chunk (no logprobs) as constant strings around its JSON-escaped text (and token ids):
    the same bytes as event(chunk_body(...)), without building and encoding the whole body per event."""
    head: str
    mid: str
    tail: str
    with_ids: bool

    @staticmethod
    def of(meta: dict, chat: bool, index: int, with_ids: bool) -> "ChunkTemplate | None":
        body = chunk_body(meta, chat, index, TEXT_MARK, None, None)
        if with_ids:
            body["choices"][0]["token_ids"] = IDS_MARK
        text = event(body)
        marks = [json.dumps(TEXT_MARK)] + ([json.dumps(IDS_MARK)] if with_ids else [])
        if any(text.count(m) != 1 for m in marks):
            return None  # the caller falls back to chunk_body
        head, _, rest = text.partition(marks[0])
        mid, _, tail = rest.partition(marks[1]) if with_ids else ("", "", rest)
        return ChunkTemplate(head, mid, tail, with_ids)

    def render(self, text: str, ids: list[int] | None) -> str:
        if self.with_ids:  # json.dumps of a list of ints, joined by hand
            return f"{self.head}{json.dumps(text)}{self.mid}[{', '.join(map(str, ids))}]{self.tail}"
        return f"{self.head}{json.dumps(text)}{self.tail}"


class SSEResponse(StreamingResponse):
    """A StreamingResponse whose plain text events `Frontend.dispatch` may write itself (`Inbox.offer`): given the
    stream's inbox and its ChunkTemplate (None: every event goes through the task)."""

    def __init__(self, content, inbox: Inbox | asyncio.Queue, template: "ChunkTemplate | None", **kw):
        super().__init__(content, **kw)
        self.inbox, self.template = inbox, template

    async def __call__(self, scope, receive, send):
        if self.template is not None:  # the task sleeps in its inbox only between events, once the headers and every
            self.inbox.direct = direct_writer(send, self.template)  # earlier event are out: the writes keep the order
        await super().__call__(scope, receive, send)


def send_now(send, message: dict) -> bool:
    """Run an ASGI `send` to its end here, without the event loop: True if it got there. uvicorn's send of a body
    waits only while the socket is backed up (flow control), and it waits before it writes: a send that would
    wait is closed unwritten (False), and the caller queues the reply for the request's own task instead."""
    coro = send(message)
    try:
        coro.send(None)  # an await that never waits runs to its end in this one call
    except StopIteration:
        return True
    except Exception:  # noqa: BLE001 -- the task's own send meets it again and handles it (a gone client)
        return False
    coro.close()
    return False


def direct_writer(send, template: "ChunkTemplate"):
    """`Inbox.direct` for a stream: a plain reply (`plain_reply`) as its SSE text event, written now; False for any
    other reply, or when the write would wait."""
    def write(reply) -> bool:
        if not plain_reply(reply) or (reply.output_ids is not None) != template.with_ids:
            return False
        if not reply.incremental_output and not reply.output_ids:
            return True  # sse() writes nothing for it either (text held back inside a UTF-8 character)
        body = template.render(reply.incremental_output, reply.output_ids).encode()
        return send_now(send, {"type": "http.response.body", "body": body, "more_body": True})
    return write


async def sse(replies, meta: dict, chat: bool, include_usage: bool,
              templates: list["ChunkTemplate | None"]) -> AsyncIterator[str]:
    """Server-sent events: a role chunk (chat), one chunk per piece of text, the finish, usage, [DONE].
    One entry of `templates` per choice: its text chunks through that ChunkTemplate (with token ids if it has
    them), or built whole (None: --naive-stream, or a name the template cannot hold)."""
    n = len(templates)
    if chat:
        for i in range(n):
            yield event(chunk_body(meta, chat, i, "", None, None, role=True))
    last: dict[int, UserReply] = {}
    offset = [0] * n  # completions' text_offset: characters of logprob tokens sent so far, per choice
    async for i, text, reply in replies:
        last[i] = reply
        if reply.error is not None:  # a worker died mid-stream: say so, then end without [DONE]
            yield event({"error": {"message": reply.error, "type": "service_unavailable"}})
            return
        if text or reply.logprobs or reply.output_ids:
            t = templates[i]
            if t is not None and reply.logprobs is None and (reply.output_ids is not None) == t.with_ids:
                yield t.render(text, reply.output_ids)
            else:
                body = chunk_body(meta, chat, i, text, None, reply.logprobs, offset=offset[i])
                if reply.output_ids is not None:  # --skip-tokenizer-init: the chunk's token ids
                    body["choices"][0]["token_ids"] = reply.output_ids
                yield event(body)
                offset[i] += sum(len(e["token"]) for e in reply.logprobs or [])
        if reply.finished:
            yield event(chunk_body(meta, chat, i, None if chat else "", reply.finish_reason, None))
    if include_usage and last:
        yield event(usage_chunk(meta, chat, list(last.values())))
    yield "data: [DONE]\n\n"
