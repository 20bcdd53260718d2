"""Chapter 9 — the OpenAI wire format: which request bodies are accepted, and which response bodies go out?

The API server's handlers (`api.py`) only move messages; what a body may contain, and the exact
shape of every JSON object sent back, live here. Each response builder is a plain function of
plain values, so the conformance test can check them against OpenAI's published schemas.
"""
from __future__ import annotations

from pydantic import BaseModel

from ..messages import UserReply
from ..req import SamplingParams

DEFAULT_MAX_TOKENS = 256  # when a request names none (OpenAI's "up to the context" is minutes on a CPU)
MAX_TOKENS_CAP = 2**31 - 1  # larger values are cut here first (the wire carries 64-bit ints), then to the context


class APIError(Exception):
    """A refusal with an HTTP status, raised anywhere in a handler and answered as OpenAI's error body."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        self.status, self.message, self.code, self.param = status, message, code, param


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    kind = {401: "authentication_error", 404: "not_found_error", 503: "service_unavailable"}.get(
        status, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


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

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


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


def chat_prompt(body: ChatRequest) -> list[dict]:
    if not body.messages:
        raise APIError(400, "messages must not be empty", "invalid_value", "messages")
    return [m.as_dict() for m in body.messages]


def completion_prompt(body: CompletionRequest) -> str | list[int]:
    """The one prompt of a completions body: a string, or token ids that fit the wire's int32."""
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
    return prompt


# ---- response bodies -------------------------------------------------------------------------------
def usage(reply: UserReply) -> dict:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}


def model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "minisgl-edu"}


def response_body(meta: dict, chat: bool, text: str, last: UserReply, warning: str | None) -> dict:
    """The non-streamed body: one choice holding the whole text."""
    choice = {"index": 0, "finish_reason": last.finish_reason, "logprobs": None}
    choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
    out = {**meta, "object": "chat.completion" if chat else "text_completion", "choices": [choice],
           "usage": usage(last)}
    if warning:
        out["warnings"] = [warning]
    return out


def chunk_body(meta: dict, chat: bool, text: str | None, finish: str | None, role: bool = False) -> dict:
    """One streamed chunk: a piece of text, or (finish set) the end of the choice."""
    if chat:
        delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
    return {**meta, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice]}


def usage_chunk(meta: dict, chat: bool, last: UserReply) -> dict:
    return {**meta, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [],
            "usage": usage(last)}
