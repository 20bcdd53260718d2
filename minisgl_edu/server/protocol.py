"""Chapter 9 — the OpenAI wire format: which request bodies are accepted, and which response bodies go out?

The API server's handlers (`api.py`) only move messages; what a body may contain, and the exact
shape of every JSON object sent back, live here. Each response builder is a plain function of
plain values, so the conformance test can check them against OpenAI's published schemas.
"""
from __future__ import annotations

import json
from typing import Annotated, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from ..messages import UserReply
from ..req import SamplingParams

DEFAULT_MAX_TOKENS = 256  # when a request names none (OpenAI's "up to the context" is minutes on a CPU)
MAX_TOKENS_CAP = 2**31 - 1  # larger values are cut here first (the wire carries 64-bit ints), then to the context
MAX_N = 16  # OpenAI allows 128; each sample here is a whole request, so fewer
MAX_LOGIT_BIAS = 1024  # entries in logit_bias / stop_token_ids (OpenAI states no limit; a vocabulary has ~10^5)


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
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"] = "text"
    text: str


class ChatMessage(BaseModel):
    """One message. A client may send back the assistant message it received (with its null fields)."""
    model_config = ConfigDict(extra="forbid")
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None  # passed to the chat template
    refusal: str | None = None
    annotations: list | None = None
    tool_calls: list | None = None
    tool_call_id: str | None = None
    function_call: dict | None = None
    audio: dict | None = None

    def as_dict(self) -> dict:
        for field in ("tool_calls", "tool_call_id", "function_call", "audio"):
            if getattr(self, field):
                raise APIError(400, f"messages: {field} is not supported (no tool calls or audio here)",
                               "unsupported_parameter", "messages")
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content or [])
        return {"role": self.role, "content": text} | ({"name": self.name} if self.name else {})


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    include_obfuscation: bool | None = None  # OpenAI pads chunks against side channels; we send none


class JsonSchemaFormat(BaseModel):
    name: str
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


Unit = Annotated[float, Field(ge=-2, le=2)]  # OpenAI's range for presence and frequency penalties


class CommonParams(BaseModel):
    """The fields both endpoints share. An unknown field is a 400 (`extra="forbid"`): see `REFUSED`."""
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    max_tokens: int | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = 1.0  # OpenAI's default: pass 0 for greedy
    top_p: Annotated[float, Field(ge=0, le=1)] | None = 1.0
    n: Annotated[int, Field(ge=1, le=MAX_N)] | None = 1
    seed: int | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    presence_penalty: Unit | None = 0.0
    frequency_penalty: Unit | None = 0.0
    logit_bias: Annotated[dict[str, Annotated[float, Field(ge=-100, le=100)]],
                          Field(max_length=MAX_LOGIT_BIAS)] | None = None
    user: str | None = None  # an end-user id for abuse monitoring: accepted, changes nothing
    # extensions with vLLM's and SGLang's names
    top_k: int = -1
    min_p: Annotated[float, Field(ge=0, le=1)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    min_tokens: Annotated[int, Field(ge=0)] = 0
    stop_token_ids: Annotated[list[int], Field(max_length=MAX_LOGIT_BIAS)] | None = None
    ignore_eos: bool = False  # benchmarks: keep going past the end-of-sequence token

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatRequest(CommonParams):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: ResponseFormat | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    # defined by OpenAI; accepted because they change nothing in the output
    metadata: dict[str, str] | None = None
    store: bool | None = False
    service_tier: Literal["auto", "default"] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # defined by OpenAI, not served here: any value but the default is refused (`refuse_unserved`)
    modalities: list[str] | None = None
    audio: dict | None = None
    prediction: dict | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    web_search_options: dict | None = None
    functions: list[dict] | None = None
    function_call: str | dict | None = None


class CompletionRequest(CommonParams):
    prompt: str | list[int] | list[str]
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool | None = False
    suffix: str | None = None
    best_of: Annotated[int, Field(ge=0, le=20)] | None = None


class TokenizeRequest(BaseModel):
    """vLLM's /tokenize: a prompt, or chat messages through the chat template."""
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: Annotated[list[int], Field(max_length=1 << 20)]


# (field, the value it may keep, why any other value is refused) -- never a field silently ignored
REFUSED = [("store", (False, None), "nothing is stored here"),
           ("modalities", (None, ["text"]), "only text is generated"),
           ("audio", (None,), "no audio output"), ("prediction", (None,), "no predicted outputs"),
           ("reasoning_effort", (None,), "not a reasoning model"), ("verbosity", (None,), "no verbosity control"),
           ("web_search_options", (None,), "no web search"),
           ("functions", (None,), "function calling is not supported (nor tools)"),
           ("function_call", (None, "none"), "function calling is not supported"),
           ("echo", (False, None), "echo is not supported"),
           ("suffix", (None, ""), "suffix (fill-in-the-middle) is not supported by these models"),
           ("best_of", (None, 1), "best_of is not supported: send n and pick")]


def refuse_unserved(body: CommonParams) -> None:
    """A 400 for every OpenAI field this server cannot honour, set to anything but its default."""
    for name, allowed, why in REFUSED:
        if name in type(body).model_fields and getattr(body, name) not in allowed:
            raise APIError(400, f"{name}: {why}", "unsupported_parameter", name)
    if isinstance(body, ChatRequest) and body.tools and body.tool_choice != "none":
        raise APIError(400, "tools: tool calls are not implemented by this server (no tool-call parser for any "
                       "chat template); send tool_choice='none' or no tools", "unsupported_parameter", "tools")


def logit_bias_pairs(body: CommonParams) -> tuple[tuple[int, float], ...]:
    pairs = []
    for key, bias in (body.logit_bias or {}).items():
        if not key.isdigit() or int(key) >= 2**31:
            raise APIError(400, f"logit_bias keys are token ids (decimal strings), got {key[:20]!r}",
                           "invalid_value", "logit_bias")
        pairs.append((int(key), float(bias)))
    return tuple(pairs)


def json_schema_of(body: CommonParams) -> str | None:
    """response_format as the schema text the grammar is compiled from (checked here: a bad one is a 400)."""
    fmt = getattr(body, "response_format", None)
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json.dumps({"type": "object"})
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise APIError(400, "response_format.json_schema.schema is required", "invalid_value", "response_format")
    try:
        jsonschema.validators.validator_for(fmt.json_schema.schema_).check_schema(fmt.json_schema.schema_)
    except jsonschema.SchemaError as e:
        raise APIError(400, f"response_format: not a valid JSON schema: {e.message}", "invalid_value",
                       "response_format") from None
    return json.dumps(fmt.json_schema.schema_)


def sampling_params(body: CommonParams, max_tokens: int | None, logprobs: int | None) -> SamplingParams:
    """The request's sampling fields as the engine's SamplingParams, checked by the engine's own rules."""
    refuse_unserved(body)
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    temperature = 1.0 if body.temperature is None else body.temperature
    sp = SamplingParams(temperature=temperature, top_k=body.top_k,
                        top_p=1.0 if body.top_p is None else body.top_p,
                        max_tokens=min(max_tokens, MAX_TOKENS_CAP), ignore_eos=body.ignore_eos, seed=body.seed,
                        presence_penalty=body.presence_penalty or 0.0,
                        frequency_penalty=body.frequency_penalty or 0.0,
                        repetition_penalty=body.repetition_penalty, min_p=body.min_p,
                        logit_bias=logit_bias_pairs(body), stop_token_ids=tuple(body.stop_token_ids or ()),
                        min_tokens=body.min_tokens, logprobs=logprobs, json_schema=json_schema_of(body))
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
def usage(lasts: list[UserReply]) -> dict:
    """One prompt (counted once, also for n > 1) and the completion tokens of every choice."""
    prompt, completion = lasts[0].prompt_tokens, sum(r.completion_tokens for r in lasts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "minisgl-edu"}


def chat_logprobs(entries: list[dict] | None) -> dict | None:
    return None if entries is None else {"content": entries, "refusal": None}


def completion_logprobs(entries: list[dict] | None, start: int = 0) -> dict | None:
    """The legacy completions shape: parallel lists; text_offset counts characters from the choice's start."""
    if entries is None:
        return None
    offsets, at = [], start
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def response_body(meta: dict, chat: bool, choices: list[tuple[str, list[dict], UserReply]],
                  warning: str | None, asked_logprobs: bool) -> dict:
    """The non-streamed body: one choice per sample, each holding its whole text."""
    out = []
    for i, (text, entries, last) in enumerate(choices):
        lp = entries if asked_logprobs else None
        choice = {"index": i, "finish_reason": last.finish_reason,
                  "logprobs": chat_logprobs(lp) if chat else completion_logprobs(lp)}
        choice.update({"message": {"role": "assistant", "content": text, "refusal": None}} if chat else {"text": text})
        out.append(choice)
    body = {**meta, "object": "chat.completion" if chat else "text_completion", "choices": out,
            "usage": usage([last for _, _, last in choices])}
    if warning:
        body["warnings"] = [warning]
    return body


def chunk_body(meta: dict, chat: bool, index: int, text: str | None, finish: str | None,
               entries: list[dict] | None, role: bool = False, offset: int = 0) -> dict:
    """One streamed chunk of choice `index`: a piece of text (with its logprobs), or the choice's end."""
    if chat:
        delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": chat_logprobs(entries)}
    else:
        choice = {"index": index, "text": text or "", "finish_reason": finish,
                  "logprobs": completion_logprobs(entries, offset)}
    return {**meta, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice]}


def usage_chunk(meta: dict, chat: bool, lasts: list[UserReply]) -> dict:
    return {**meta, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [],
            "usage": usage(lasts)}
