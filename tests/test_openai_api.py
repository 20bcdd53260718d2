"""Chapter 9 — the OpenAI API as clients use it, through the real server and the official `openai` client.

Every 200 body (chat, completions, streamed chunks, models) and every error body is validated
against the schemas of OpenAI's published OpenAPI spec (tests/data/openai_schemas.json, extracted by
scripts/vendor_openai_schemas.py). Expected token ids come from the tokenizer and the offline engine,
never hard-coded text.
"""
from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from test_server import Server

MODEL = "SmolLM2-135M-Instruct"
with open(__file__.rsplit("/", 1)[0] + "/data/openai_schemas.json") as _f:
    SPEC = json.load(_f)
    SCHEMAS = SPEC["$defs"]


def validate(body: dict, name: str) -> None:
    jsonschema.validate(body, {"$ref": f"#/$defs/{name}", "$defs": SCHEMAS})


def streamed_completion_schema() -> dict:
    """The spec reuses CreateCompletionResponse for streamed completions, whose finish_reason is a string; a
    chunk before the last has none yet (OpenAI's own service sends null): the one relaxation, made here."""
    defs = json.loads(json.dumps(SCHEMAS))
    choice = defs["CreateCompletionResponse"]["properties"]["choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    return {"$ref": "#/$defs/CreateCompletionResponse", "$defs": defs}


def conforms(body: dict, name: str) -> bool:
    try:
        validate(body, name)
        return True
    except jsonschema.ValidationError:
        return False


@pytest.fixture(scope="module")
def server(default_server) -> Server:
    """The session's default-model server (tests/conftest.py): a 1024-token context, a 16k-token pool."""
    return default_server


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI
    return OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def sse(url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=300) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]


def msgs(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def stats(server) -> dict:
    return httpx.get(server.url + "/debug/stats", timeout=30).json()


# ---- conformance -----------------------------------------------------------------------------------
def test_the_vendored_schemas_name_their_source_and_catch_a_missing_refusal():
    meta = SPEC["$comment"]
    assert meta["version"] == "2.3.0" and meta["licence"] == "MIT" and "openai-openapi" in meta["source"]
    good = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "logprobs": None,
         "message": {"role": "assistant", "content": "hi", "refusal": None}}]}
    assert conforms(good, "CreateChatCompletionResponse")
    no_refusal = json.loads(json.dumps(good))
    del no_refusal["choices"][0]["message"]["refusal"]  # the body this server sent before issue 15
    assert not conforms(no_refusal, "CreateChatCompletionResponse")


def test_every_body_conforms_to_openais_spec(server):
    base = server.url + "/v1"
    chat = {"model": MODEL, "messages": msgs("Name a colour."), "max_tokens": 5, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}
    r = httpx.post(base + "/chat/completions", json=chat, timeout=300)
    assert r.status_code == 200, r.text
    validate(r.json(), "CreateChatCompletionResponse")
    for c in sse(base + "/chat/completions", {**chat, "n": 2, "stream_options": {"include_usage": True}}):
        validate(c, "CreateChatCompletionStreamResponse")
    comp = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 2}
    r = httpx.post(base + "/completions", json=comp, timeout=300)
    assert r.status_code == 200, r.text
    validate(r.json(), "CreateCompletionResponse")
    relaxed, chunks = streamed_completion_schema(), sse(base + "/completions", comp)
    for c in chunks:
        jsonschema.validate(c, relaxed)
    validate(chunks[-1], "CreateCompletionResponse")  # the last chunk, with its finish_reason, as it stands
    validate(httpx.get(base + "/models").json(), "ListModelsResponse")
    validate(httpx.get(base + f"/models/{MODEL}").json(), "Model")
    for bad in [httpx.get(base + "/models/nope"), httpx.post(base + "/completions", json={**comp, "top_p": 3}),
                httpx.post(base + "/completions", json={**comp, "wat": 1})]:
        assert 400 <= bad.status_code < 500
        validate(bad.json(), "ErrorResponse")


def test_openai_client_models_retrieve(client):
    assert client.models.retrieve(MODEL).id == MODEL
    assert [m.id for m in client.models.list().data] == [MODEL]


# ---- ranges and refusals --------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [("temperature", 2.01), ("top_p", 1.5), ("presence_penalty", -2.5),
                                         ("frequency_penalty", 3), ("top_logprobs", 21), ("n", 0), ("n", 17),
                                         ("stop", ["a", "b", "c", "d", "e"]), ("logit_bias", {"5": 101}),
                                         ("min_p", 1.5), ("tools", [{"type": "function",
                                                                     "function": {"name": "f"}}]),
                                         ("audio", {"voice": "x"}), ("store", True), ("frobnicate", 1)])
def test_out_of_range_or_unserved_is_400_naming_the_field(server, field, value):
    body = {"messages": msgs("hi"), "max_tokens": 2, "logprobs": True, field: value}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


@pytest.mark.parametrize("field,value", [("logprobs", 6), ("echo", True), ("suffix", "end"), ("best_of", 3)])
def test_completions_refusals(server, field, value):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2, field: value}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_a_received_message_can_be_sent_back_and_tool_messages_are_refused(client, server):
    first = client.chat.completions.create(model=MODEL, messages=msgs("Hi!"), max_tokens=4, temperature=0)
    history = msgs("Hi!") + [first.choices[0].message.model_dump()] + msgs("And?")  # nulls and all
    assert client.chat.completions.create(model=MODEL, messages=history, max_tokens=2).choices[0].message.content
    tool = msgs("hi") + [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function"}]}]
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": tool, "max_tokens": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text


# ---- tokenize ------------------------------------------------------------------------------------
def test_tokenize_and_detokenize_round_trip(server, tokenizer):
    text = "Tokyo is 東京."
    r = httpx.post(server.url + "/tokenize", json={"prompt": text}, timeout=120).json()
    assert r["tokens"] == tokenizer.encode(text) and r["count"] == len(r["tokens"]) and r["max_model_len"] == 1024
    assert httpx.post(server.url + "/detokenize", json={"tokens": r["tokens"]}).json()["prompt"] == text
    chat = httpx.post(server.url + "/tokenize", json={"messages": msgs(text)}).json()["tokens"]
    assert chat == list(tokenizer.apply_chat_template(msgs(text), add_generation_prompt=True, tokenize=True,
                                                      return_dict=True)["input_ids"])
    assert httpx.post(server.url + "/detokenize", json={"tokens": [10**6]}).status_code == 400


# ---- logprobs --------------------------------------------------------------------------------------
def test_chat_logprobs_streamed_equal_non_streamed_and_greedy_picks_the_top(client):
    kw = dict(model=MODEL, messages=msgs("What is the capital of France?"), max_tokens=6, temperature=0,
              logprobs=True, top_logprobs=3)
    full = client.chat.completions.create(**kw).choices[0]
    content = full.logprobs.content
    assert len(content) == 6 and "".join(e.token for e in content) == full.message.content
    for e in content:
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 and e.logprob <= 0
    streamed = [e for ch in client.chat.completions.create(**kw, stream=True) for c in ch.choices
                if c.logprobs and c.logprobs.content for e in c.logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in content]


def test_completions_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(max(t, key=t.get) == tok for t, tok in zip(lp.top_logprobs, lp.tokens))
    assert lp.text_offset[0] == 0 and "".join(lp.tokens) == r.choices[0].text
    streamed = [t for ch in client.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=4,
                                                      temperature=0, logprobs=2, stream=True)
                if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens]
    assert streamed == lp.tokens


# ---- sampling controls through the client ----------------------------------------------------------
def test_logit_bias_bans_and_forces(client, tokenizer):
    kw = dict(model=MODEL, prompt="The capital of France is", max_tokens=4, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    first = tokenizer.encode(plain)[0]
    banned = client.completions.create(**kw, logit_bias={str(first): -100}).choices[0].text
    assert tokenizer.encode(banned)[0] != first
    forced = client.completions.create(**kw, logit_bias={str(first): 100}).choices[0].text
    assert tokenizer.encode(forced) == [first] * 4


def test_penalties_stop_token_ids_and_min_tokens(client, tokenizer):
    kw = dict(model=MODEL, prompt="red, red, red, red,", max_tokens=8, temperature=0)
    plain = client.completions.create(**kw).choices[0]
    penalised = client.completions.create(**kw, frequency_penalty=2.0, presence_penalty=1.0).choices[0]
    assert penalised.text != plain.text
    rep = client.completions.create(**kw, extra_body={"repetition_penalty": 1.5}).choices[0]
    assert rep.text != plain.text
    ids = tokenizer.encode(plain.text)
    stop = ids[2]
    stopped = client.completions.create(**kw, extra_body={"stop_token_ids": [stop]}).choices[0]
    assert stopped.finish_reason == "stop" and tokenizer.encode(stopped.text) == ids[:ids.index(stop) + 1]
    r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, temperature=0,
                                  extra_body={"min_tokens": 5, "stop_token_ids": [ids[0]]})
    assert r.usage.completion_tokens == 5


# ---- n > 1 -----------------------------------------------------------------------------------------
def test_n_samples_share_one_prefill(server, client, tokenizer):
    prompt = "Some words: " + " ".join(f"w{i}" for i in range(40)) + ". Now a story about a"
    plen = len(tokenizer.encode(prompt))
    before = stats(server)
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=1.0, seed=7, n=4)
    after = stats(server)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3] and r.usage.prompt_tokens == plen
    assert r.usage.completion_tokens == sum(len(tokenizer.encode(c.text)) >= 0 and 4 for c in r.choices)
    prefilled = after["prefill_tokens"] - before["prefill_tokens"]
    assert prefilled == plen + 4  # the prompt once, then one token per sample (the radix cache has the rest)
    assert after["cache_hit_tokens"] - before["cache_hit_tokens"] == 4 * (plen - 1)
    again = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=1.0, seed=7, n=4)
    assert [c.text for c in again.choices] == [c.text for c in r.choices]  # seed + i per sample
    assert len({c.text for c in r.choices}) > 1
    streamed = {}
    for ch in client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=1.0, seed=7, n=4,
                                        stream=True):
        for c in ch.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert [streamed[i] for i in range(4)] == [c.text for c in r.choices]


# ---- structured output -----------------------------------------------------------------------------
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def test_response_format_json_schema_and_json_object(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    kw = dict(model=MODEL, messages=msgs("Describe a pirate as JSON."), max_tokens=40, temperature=0)
    r = client.chat.completions.create(**kw, response_format=fmt).choices[0]
    assert r.finish_reason == "stop"
    jsonschema.validate(json.loads(r.message.content), PERSON)
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(**kw, response_format=fmt, stream=True) if c.choices)
    assert streamed == r.message.content
    obj = client.chat.completions.create(**kw, response_format={"type": "json_object"}).choices[0]
    assert obj.finish_reason == "length" or isinstance(json.loads(obj.message.content), dict)


@pytest.mark.parametrize("schema", [{"type": 5}, {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}])
def test_invalid_schema_is_400(server, schema):
    body = {"messages": msgs("hi"), "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text


def test_unreachable_schema_ends_with_length(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "long", "schema": {
        "type": "object", "properties": {"s": {"type": "string", "minLength": 400}}, "required": ["s"]}}}
    r = client.chat.completions.create(model=MODEL, messages=msgs("hi"), max_tokens=8, response_format=fmt)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8


# ---- the server stays whole ------------------------------------------------------------------------
def test_every_page_returns_to_the_pool(server):
    s = stats(server)
    assert s["live_reqs"] == 0 and s["integrity"] == "ok", s
    assert s["free_pages"] + s["cached_pages"] == s["num_pages"], s
