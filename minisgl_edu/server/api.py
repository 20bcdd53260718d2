"""Chapter 9 — the API server: HTTP in, a TokenizeMsg out; UserReplies in, JSON or SSE out.

The handler never waits on the engine directly. It takes a uid, registers a queue for it, sends one
TokenizeMsg, and then reads that queue; a background task (`Frontend.listen`) receives every
UserReply from the detokenizer and drops it into the queue of its uid. A request's messages always
go to tokenizer `uid % n`, so an AbortMsg can never overtake the TokenizeMsg it cancels.

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
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..messages import (AbortMsg, SchedulerStats, StatsMsg, StatsReply, TokenizeMsg, UserReply, decode, encode,
                        unbatch)
from ..req import SamplingParams
from .common import ServerConfig, trace
from .metrics import ServerMetrics
from .queues import Addresses

log = logging.getLogger("minisgl_edu")

DEFAULT_MAX_TOKENS = 256  # when a request names none (OpenAI's "up to the context" is minutes on a CPU)
MAX_TOKENS_CAP = 2**31 - 1  # larger values are cut here first (the wire carries 64-bit ints), then to the context
MAX_BODY_BYTES = 16 << 20


class APIError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        self.status, self.message, self.code, self.param = status, message, code, param


def error_json(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    kind = {401: "authentication_error", 404: "not_found_error", 503: "service_unavailable"}.get(
        status, "invalid_request_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


# ---- request bodies --------------------------------------------------------------------------------
class TextPart(BaseModel):
    type: str = "text"
    text: str


class ChatMessage(BaseModel):
    role: str
    content: str | list[TextPart] | None = None

    def as_dict(self) -> dict:
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content or [])
        return {"role": self.role, "content": text}


class StreamOptions(BaseModel):
    include_usage: bool = False


class CommonParams(BaseModel):
    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0  # OpenAI's default: pass 0 for greedy
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    ignore_eos: bool = False  # an extension (benchmarks): keep going past the end-of-sequence token


class ChatRequest(CommonParams):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None


class CompletionRequest(CommonParams):
    prompt: str | list[int] | list[str]
    logprobs: int | None = None
    echo: bool = False


def sampling_params(body: CommonParams, max_tokens: int | None) -> SamplingParams:
    """The request's sampling fields as the engine's SamplingParams, checked by the engine's own rules."""
    unsupported = [(body.n != 1, "n", "only n=1 is supported: send n requests"),
                   (bool(getattr(body, "logprobs", None)), "logprobs", "logprobs are not supported"),
                   (getattr(body, "echo", False), "echo", "echo is not supported"),
                   (body.presence_penalty != 0 or body.frequency_penalty != 0, "presence_penalty",
                    "presence/frequency penalties are not supported")]
    for bad, param, message in unsupported:
        if bad:
            raise APIError(400, message, "unsupported_parameter", param)
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    sp = SamplingParams(temperature=body.temperature, top_k=body.top_k, top_p=body.top_p,
                        max_tokens=min(max_tokens, MAX_TOKENS_CAP), ignore_eos=body.ignore_eos, seed=body.seed)
    try:
        sp.validate()
    except ValueError as e:
        raise APIError(400, str(e), "invalid_value", str(e).split()[0]) from None
    return sp


# ---- stop strings --------------------------------------------------------------------------------
@dataclass
class StopStrings:
    """Cut the output at the first stop string (excluded); hold back a tail that might begin one."""
    stops: list[str]
    held: str = ""

    def feed(self, text: str, final: bool) -> tuple[str, bool]:
        self.held += text
        hits = [i for i in (self.held.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.held = self.held[:min(hits)], ""
            return out, True
        # hold back the longest tail that could still grow into a stop string
        keep = 0 if final else max((k for s in self.stops for k in range(1, len(s)) if self.held.endswith(s[:k])),
                                   default=0)
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
        self.metrics = ServerMetrics(cfg.served_name)  # /metrics: fed here, as replies arrive

    def send(self, msg) -> None:
        # a plain (blocking-API) PUSH: it queues without waiting, so it is safe in a cancelled handler too
        trace(self.cfg, "api", f"send {type(msg).__name__}", [msg.uid])
        self.to_tokenizers[msg.uid % len(self.to_tokenizers)].send(encode(msg))

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
                replies = self.observe(replies)
                for reply in replies:
                    q = self.queues.get(reply.uid)
                    if q is not None:  # replies of aborted requests find no queue
                        q.put_nowait(reply)
        finally:
            sock.close(linger=0)

    def observe(self, replies: list) -> list:
        """Feed /metrics (latencies and token counts as replies arrive; the scheduler's SchedulerStats, which
        are for us alone and are taken out); return the replies that go to a request's queue."""
        now, out = time.perf_counter(), []
        for reply in replies:
            if isinstance(reply, SchedulerStats):
                self.metrics.sched = reply
                continue
            if isinstance(reply, UserReply):
                self.metrics.on_reply(reply, now)
            out.append(reply)
        return out

    def close_sockets(self) -> None:
        for s in self.to_tokenizers:
            s.close(linger=0)

    def fail_all(self, reason: str) -> None:
        """A worker died: /health fails and every waiting request gets an error (call in the loop's thread)."""
        self.dead = reason
        for uid, q in list(self.queues.items()):
            q.put_nowait(UserReply(uid, "", True, "error", error=reason, status=503))


async def next_reply(q: asyncio.Queue, request: Request, coalesce: bool = True):
    """The next reply for this request; None if the client has gone away meanwhile. With `coalesce`, every
    reply already waiting is merged into it: one SSE event for what arrived while we were busy."""
    while q.empty():  # wait_for costs a task per call: only pay it when there is nothing to take
        try:
            reply = await asyncio.wait_for(q.get(), timeout=0.5)
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
    return UserReply(a.uid, a.incremental_output + b.incremental_output, b.finished, b.finish_reason,
                     b.prompt_tokens or a.prompt_tokens, b.completion_tokens, a.warning or b.warning, b.error,
                     b.status, ids)


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
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        frontend.loop = asyncio.get_running_loop()
        task = asyncio.create_task(frontend.listen())
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # its `finally` closes the socket

    app = FastAPI(title="minisgl-edu", lifespan=lifespan)
    names = {cfg.served_name, cfg.model_path}

    @app.exception_handler(APIError)
    async def _api_error(request, e: APIError):
        return error_json(e.status, e.message, e.code, e.param)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, e: RequestValidationError):
        errs = e.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
        if any(err.get("type") == "json_invalid" for err in errs):
            return error_json(400, f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}".strip(),
                              "invalid_json")
        param = ".".join(str(x) for x in first["loc"] if x != "body")
        return error_json(422, f"{param or 'body'}: {first['msg']}", "invalid_type", param or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, e: StarletteHTTPException):
        return error_json(e.status_code, str(e.detail))

    app.add_middleware(BodyLimit)

    def check_key(request: Request) -> None:
        if cfg.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), cfg.api_key.encode()):
            raise APIError(401, "missing or wrong API key (send Authorization: Bearer KEY)", "invalid_api_key")

    def check_model(model: str | None) -> None:
        if model is not None and model not in names:
            raise APIError(404, f"model {model!r} is not served here (try {cfg.served_name!r})", "model_not_found",
                           "model")
        if frontend.dead:
            raise APIError(503, f"the server is going down: {frontend.dead}", "worker_died")

    @app.get("/health")
    async def health():
        if frontend.dead:
            return JSONResponse({"status": "unhealthy", "reason": frontend.dead}, 503)
        return {"status": "ok", "workers": frontend.pids}

    @app.get("/v1/models", dependencies=[Depends(check_key)])
    async def models():
        return {"object": "list", "data": [{"id": cfg.served_name, "object": "model", "created": 0,
                                            "owned_by": "minisgl-edu"}]}

    @app.get("/debug/stats", dependencies=[Depends(check_key)])
    async def debug_stats(request: Request):
        """The scheduler's page counts and integrity check (asked through the same pipes as requests)."""
        uid, q = frontend.open()
        frontend.send(StatsMsg(uid))
        try:
            reply = await asyncio.wait_for(q.get(), timeout=30)
        finally:
            frontend.close(uid, abort=False)
        if not isinstance(reply, StatsReply):
            raise APIError(503, reply.error or "no stats", "worker_died")
        return asdict(reply)

    @app.get("/metrics")
    async def metrics():
        """Prometheus text format (server/metrics.py): latency histograms, token counters, scheduler gauges."""
        try:
            body = frontend.metrics.render()
        except ImportError:
            raise APIError(503, "/metrics needs the prometheus_client package", "metrics_unavailable") from None
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/chat/completions", dependencies=[Depends(check_key)])
    async def chat(body: ChatRequest, request: Request):
        check_model(body.model)
        if cfg.skip_tokenizer_init:
            raise APIError(400, "chat needs a tokenizer, and this server runs with --skip-tokenizer-init: send "
                           "token ids to /v1/completions", "unsupported_parameter", "messages")
        if not body.messages:
            raise APIError(400, "messages must not be empty", "invalid_value", "messages")
        sp = sampling_params(body, body.max_completion_tokens if body.max_tokens is None else body.max_tokens)
        msg = TokenizeMsg(-1, None, [m.as_dict() for m in body.messages], sp)
        return await respond(msg, body, request, chat=True)

    @app.post("/v1/completions", dependencies=[Depends(check_key)])
    async def completions(body: CompletionRequest, request: Request):
        check_model(body.model)
        prompt = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                raise APIError(400, "one prompt per request (send a list of one string)", "unsupported_parameter",
                               "prompt")
            prompt = prompt[0]
        if len(prompt) == 0:
            raise APIError(400, "the prompt is empty", "invalid_value", "prompt")
        if not isinstance(prompt, str) and not all(0 <= t < 2**31 for t in prompt):  # the wire carries int32 ids
            raise APIError(400, "token ids must lie in [0, 2^31)", "invalid_value", "prompt")
        if cfg.skip_tokenizer_init and (isinstance(prompt, str) or body.stop):
            raise APIError(400, "this server runs with --skip-tokenizer-init: the prompt must be token ids and "
                           "stop strings cannot be matched", "unsupported_parameter",
                           "prompt" if isinstance(prompt, str) else "stop")
        sp = sampling_params(body, body.max_tokens)
        msg = TokenizeMsg(-1, prompt, None, sp) if isinstance(prompt, str) else TokenizeMsg(-1, None, None, sp, prompt)
        return await respond(msg, body, request, chat=False)

    async def respond(msg: TokenizeMsg, body: CommonParams, request: Request, chat: bool):
        uid, q = frontend.open()
        msg.uid = uid
        frontend.metrics.opened(uid)
        try:
            frontend.send(msg)
        except (OverflowError, ValueError) as e:  # msgpack: ints beyond 64 bits, strings with lone surrogates
            frontend.close(uid, abort=False)
            frontend.metrics.forget(uid)
            raise APIError(400, f"the request cannot be encoded: {e}", "invalid_value") from None
        coalesce = not cfg.naive_stream
        first = await next_reply(q, request, coalesce)  # wait for the first token: a refusal still gets a status code
        if first is None or first.error is not None:
            frontend.close(uid, abort=first is None)
            if first is None:
                return JSONResponse({}, 499)
            code = "context_length_exceeded" if first.status == 413 else "invalid_request"
            return error_json(first.status, first.error, code)
        headers = {"x-minisgl-warning": first.warning} if first.warning else {}
        stops = StopStrings([body.stop] if isinstance(body.stop, str) else list(body.stop or []))
        kind = "chatcmpl" if chat else "cmpl"
        meta = {"id": f"{kind}-{uid}", "created": int(time.time()), "model": cfg.served_name}
        replies = stream_replies(uid, q, first, stops, request, coalesce)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(sse(replies, meta, chat, include_usage), media_type="text/event-stream",
                                     headers=headers)
        text, ids, last = [], [], first
        async for piece, last in replies:
            text.append(piece)
            ids += last.output_ids or []
        if last.error is not None:
            return error_json(last.status, last.error, "worker_died")
        choice = {"index": 0, "finish_reason": last.finish_reason, "logprobs": None}
        choice.update({"message": {"role": "assistant", "content": "".join(text)}} if chat else {"text": "".join(text)})
        if cfg.skip_tokenizer_init:
            choice["token_ids"] = ids  # no tokenizer: the output is token ids, the text stays empty
        out = {**meta, "object": "chat.completion" if chat else "text_completion", "choices": [choice],
               "usage": usage(last)}
        if first.warning:
            out["warnings"] = [first.warning]
        return JSONResponse(out, headers=headers)

    async def stream_replies(uid: int, q: asyncio.Queue, first: UserReply, stops: StopStrings,
                             request: Request, coalesce: bool = True) -> AsyncIterator[tuple[str, UserReply]]:
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
                reply = await next_reply(q, request, coalesce)
                if reply is None:
                    return
        finally:
            frontend.close(uid, abort=not engine_done)  # a stop string, a gone client: free its pages

    async def sse(replies, meta: dict, chat: bool, include_usage: bool) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None, role: bool = False, ids: list[int] | None = None) -> str:
            if chat:
                delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            if ids is not None:
                choice["token_ids"] = ids  # --skip-tokenizer-init
            return f"data: {json.dumps({**meta, 'object': obj, 'choices': [choice]})}\n\n"

        if chat:
            yield chunk("", None, role=True)
        last = None
        async for text, last in replies:
            if last.error is not None:  # a worker died mid-stream: say so, then end without [DONE]
                yield f"data: {json.dumps({'error': {'message': last.error, 'type': 'service_unavailable'}})}\n\n"
                return
            if text or last.output_ids:
                yield chunk(text, None, ids=last.output_ids)
            if last.finished:
                yield chunk(None if chat else "", last.finish_reason)
        if include_usage and last is not None:
            yield f"data: {json.dumps({**meta, 'object': obj, 'choices': [], 'usage': usage(last)})}\n\n"
        yield "data: [DONE]\n\n"

    return app


def usage(reply: UserReply) -> dict:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}
