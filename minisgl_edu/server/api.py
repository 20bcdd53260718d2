"""Chapter 9 — the API server: HTTP in, a TokenizeMsg out; UserReplies in, JSON or SSE out.

The handler never waits on the engine directly. It takes a uid, registers a queue for it, sends one
TokenizeMsg, and then reads that queue; a background task (`Frontend.listen`) receives every
UserReply from the detokenizer and drops it into the queue of its uid. A request's messages always
go to the same tokenizer (`Addresses.tokenizer_of`), so an AbortMsg can never overtake the
TokenizeMsg it cancels. The bodies themselves (what a request may hold, what a reply looks like)
are in `protocol.py`.

Errors are OpenAI-shaped (`{"error": {"message", "type", "param", "code"}}`):

| status | when |
| --- | --- |
| 400 | the body is not JSON; a value out of range (`SamplingParams.validate`: temperature < 0, top_p outside (0, 1], max_tokens <= 0, ...); empty messages or prompt; unsupported options (`n` > 1, `logprobs`, `echo`, penalties) |
| 401 | `--api-key` is set and the `Authorization: Bearer` header is missing or wrong |
| 404 | an unknown model name; an unknown route |
| 413 | the prompt does not fit the model's context (or the body exceeds 16 MiB) |
| 422 | the JSON does not have the request's shape (a missing field, a wrong type) |
| 503 | a worker process died: the server is going down |

An absurdly large `max_tokens` is *not* an error: the scheduler clamps it to what the context leaves
after the prompt and the reply carries a warning (the `x-minisgl-warning` header, and `warnings` in
a non-streamed body).
"""
from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import AsyncIterator

import zmq
import zmq.asyncio
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..messages import AbortMsg, StatsMsg, StatsReply, TokenizeMsg, UserReply, decode, encode, unbatch
from .common import ServerConfig, trace
from .protocol import (APIError, ChatRequest, CommonParams, CompletionRequest, chat_prompt, chunk_body,
                       completion_prompt, error_body, model_card, response_body, sampling_params, usage_chunk)
from .queues import Addresses

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

    def send(self, msg) -> None:
        # a plain (blocking-API) PUSH: it queues without waiting, so it is safe in a cancelled handler too
        trace(self.cfg, "api", f"send {type(msg).__name__}", [msg.uid])
        self.to_tokenizers[self.addrs.tokenizer_of(msg.uid)].send(encode(msg))

    def open(self) -> tuple[int, asyncio.Queue]:
        uid = next(self.uids)
        self.queues[uid] = asyncio.Queue()
        return uid, self.queues[uid]

    def close(self, uid: int, abort: bool) -> None:
        if self.queues.pop(uid, None) is not None and abort and self.dead is None:
            self.send(AbortMsg(uid))  # frees the request's pages in the scheduler

    async def listen(self) -> None:
        sock = zmq.asyncio.Context.instance().socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self.addrs.frontend)
        try:
            while True:
                replies = unbatch(decode(await sock.recv()))
                trace(self.cfg, "api", "recv UserReply", [r.uid for r in replies if isinstance(r, UserReply)])
                for reply in replies:
                    q = self.queues.get(reply.uid)
                    if q is not None:  # replies of aborted requests find no queue
                        q.put_nowait(reply)
        finally:
            sock.close(linger=0)

    def close_sockets(self) -> None:
        for s in self.to_tokenizers:
            s.close(linger=0)

    def fail_all(self, reason: str) -> None:
        """A worker died: /health fails and every waiting request gets an error (call in the loop's thread)."""
        self.dead = reason
        for uid, q in list(self.queues.items()):
            q.put_nowait(UserReply(uid, "", True, "error", error=reason, status=503))


async def next_reply(q: asyncio.Queue, request: Request):
    """The next reply for this request; None if the client has gone away meanwhile."""
    while True:
        try:
            return await asyncio.wait_for(q.get(), timeout=0.5)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                return None


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
    return app


@asynccontextmanager
async def lifespan(app: FastAPI):
    frontend: Frontend = app.state.frontend
    frontend.loop = asyncio.get_running_loop()
    task = asyncio.create_task(frontend.listen())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # its `finally` closes the socket


RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_long", "too_short",
                "literal_error", "enum"}


async def invalid_body(request: Request, e: RequestValidationError) -> JSONResponse:
    """400 for bad JSON, an unknown field or a value out of the spec's range; 422 for a wrong shape."""
    errs = e.errors()
    first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
    if any(err.get("type") == "json_invalid" for err in errs):
        return error_json(400, f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}".strip(),
                          "invalid_json")
    for err in errs:
        param = ".".join(str(x) for x in err["loc"] if x != "body")
        if err.get("type") == "extra_forbidden":
            return error_json(400, f"unknown field {param!r}: not an OpenAI field nor one of this server's "
                              "extensions (see chapter 9)", "unknown_parameter", param)
        if err.get("type") in RANGE_ERRORS:
            return error_json(400, f"{param}: {err['msg']}", "invalid_value", param)
    param = ".".join(str(x) for x in first["loc"] if x != "body")
    return error_json(422, f"{param or 'body'}: {first['msg']}", "invalid_type", param or None)


def check_key(request: Request) -> None:
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
    return {"status": "ok", "workers": frontend.pids}


async def models(request: Request):
    return {"object": "list", "data": [model_card(request.app.state.cfg.served_name)]}


async def model_info(model: str, request: Request):
    check_model(request, model)
    return model_card(request.app.state.cfg.served_name)


async def debug_stats(request: Request):
    """The scheduler's page counts and integrity check (asked through the same pipes as requests)."""
    frontend: Frontend = request.app.state.frontend
    uid, q = frontend.open()
    frontend.send(StatsMsg(uid))
    try:
        reply = await asyncio.wait_for(q.get(), timeout=30)
    finally:
        frontend.close(uid, abort=False)
    if not isinstance(reply, StatsReply):
        raise APIError(503, reply.error or "no stats", "worker_died")
    return asdict(reply)


async def chat(body: ChatRequest, request: Request):
    check_model(request, body.model)
    messages = chat_prompt(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", "invalid_value", "top_logprobs")
    sp = sampling_params(body, body.max_completion_tokens if body.max_tokens is None else body.max_tokens,
                         (body.top_logprobs or 0) if body.logprobs else None)
    return await respond(request, body, lambda uid: TokenizeMsg(uid, None, messages, sp), chat=True)


async def completions(body: CompletionRequest, request: Request):
    check_model(request, body.model)
    prompt = completion_prompt(body)
    sp = sampling_params(body, body.max_tokens, body.logprobs)
    text, ids = (prompt, None) if isinstance(prompt, str) else (None, prompt)
    return await respond(request, body, lambda uid: TokenizeMsg(uid, text, None, sp, ids), chat=False)


async def submit(frontend: Frontend, make_msg, request: Request) -> tuple[int, asyncio.Queue, UserReply]:
    """Take a uid, send the request built for it, wait for its first reply (a refusal gets its status)."""
    uid, q = frontend.open()
    try:
        frontend.send(make_msg(uid))
    except (OverflowError, ValueError) as e:  # msgpack: ints beyond 64 bits, strings with lone surrogates
        frontend.close(uid, abort=False)
        raise APIError(400, f"the request cannot be encoded: {e}", "invalid_value") from None
    first = await next_reply(q, request)  # the client waits for the first token anyway
    if first is None:
        frontend.close(uid, abort=True)
        raise APIError(499, "the client went away")
    if first.error is not None:
        frontend.close(uid, abort=False)
        raise APIError(first.status, first.error, "context_length_exceeded" if first.status == 413 else
                       "invalid_request")
    return uid, q, first


async def respond(request: Request, body: CommonParams, make_msg, chat: bool):
    cfg, frontend = request.app.state.cfg, request.app.state.frontend
    uid, q, first = await submit(frontend, make_msg, request)
    headers = {"x-minisgl-warning": first.warning} if first.warning else {}
    meta = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uid}", "created": int(time.time()), "model": cfg.served_name}
    replies = stream_replies(frontend, uid, q, first, StopStrings(body.stops), request)
    if body.stream:
        return StreamingResponse(sse(replies, meta, chat, body.include_usage), media_type="text/event-stream",
                                 headers=headers)
    text, last = [], first
    async for piece, last in replies:
        text.append(piece)
    if last.error is not None:
        return error_json(last.status, last.error, "worker_died")
    return JSONResponse(response_body(meta, chat, "".join(text), last, first.warning), headers=headers)


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
            reply = await next_reply(q, request)
            if reply is None:
                return
    finally:
        frontend.close(uid, abort=not engine_done)  # a stop string, a gone client: free its pages


async def sse(replies, meta: dict, chat: bool, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events: a role chunk (chat), one chunk per piece of text, the finish, usage, [DONE]."""
    event = lambda obj: f"data: {json.dumps(obj)}\n\n"
    if chat:
        yield event(chunk_body(meta, chat, "", None, role=True))
    last = None
    async for text, last in replies:
        if last.error is not None:  # a worker died mid-stream: say so, then end without [DONE]
            yield event({"error": {"message": last.error, "type": "service_unavailable"}})
            return
        if text:
            yield event(chunk_body(meta, chat, text, None))
        if last.finished:
            yield event(chunk_body(meta, chat, None if chat else "", last.finish_reason))
    if include_usage and last is not None:
        yield event(usage_chunk(meta, chat, last))
    yield "data: [DONE]\n\n"
