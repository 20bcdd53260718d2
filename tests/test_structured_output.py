"""Chapter 9 — constrained decoding: a JSON schema compiled by xgrammar masks the logits each step.

The outputs of 20 prompts parse and validate with `jsonschema`, the same with overlap scheduling on
and off; the bitmask unpacking agrees with xgrammar's own kernel; a schema xgrammar cannot compile is
refused at admission; a schema `max_tokens` cannot reach ends with "length" and frees every page.
"""
from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from minisgl_edu import SamplingParams
from minisgl_edu.grammar import unpack

xgr = pytest.importorskip("xgrammar")

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "pet": {"enum": ["cat", "dog"]},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "pet", "age"], "additionalProperties": False}
PEOPLE = ["a pirate", "a baker", "a child", "an astronaut", "a cat lover", "a dog walker", "a queen", "a farmer",
          "a poet", "a nurse", "a robot", "a wizard", "a pilot", "a chef", "a student", "a painter", "a sailor",
          "a judge", "a miner", "a singer"]


def test_unpack_agrees_with_xgrammars_kernel():
    vocab = 1000
    bits = torch.randint(-2**31, 2**31 - 1, (3, (vocab + 31) // 32), dtype=torch.int32)
    logits = torch.zeros(3, vocab)
    xgr.apply_token_bitmask_inplace(logits, bits)
    assert torch.equal(unpack(bits, vocab), logits == 0)
    wrong = ((bits[:, :, None] >> (31 - torch.arange(32, dtype=torch.int32))) & 1).reshape(3, -1)[:, :vocab].bool()
    assert not torch.equal(wrong, logits == 0)  # the other bit order would be caught


@pytest.fixture(scope="module")
def llm(model_path):
    from minisgl_edu import LLM
    return LLM(model_path, device="cpu")


def run(sched, prompts: list[list[int]], sp: SamplingParams, first_uid: int = 0):
    reqs = [sched.add_request(first_uid + i, p, sp) for i, p in enumerate(prompts)]
    reasons = {}
    while not sched.idle:
        for o in sched.step():
            if o.finished:
                reasons[o.uid] = o.finish_reason
    return [r.output_ids for r in reqs], [reasons[first_uid + i] for i in range(len(prompts))]


def chat_ids(tokenizer, who: str) -> list[int]:
    msgs = [{"role": "user", "content": f"Describe {who} as JSON with name, pet and age."}]
    return list(tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"])


def test_twenty_json_schema_outputs_validate_overlap_on_and_off(llm, tokenizer):
    prompts = [chat_ids(tokenizer, who) for who in PEOPLE]
    sp = SamplingParams(max_tokens=40, json_schema=json.dumps(SCHEMA))
    outs = {}
    for overlap in (False, True):
        llm.scheduler.overlap = overlap
        try:
            outs[overlap], reasons = run(llm.scheduler, prompts, sp, first_uid=1000 * overlap)
        finally:
            llm.scheduler.overlap = False
        assert reasons == ["stop"] * 20
        for ids in outs[overlap]:
            jsonschema.validate(json.loads(tokenizer.decode(ids, skip_special_tokens=True)), SCHEMA)
    assert outs[True] == outs[False]
    free, _ = run(llm.scheduler, prompts[:3], SamplingParams(max_tokens=12), first_uid=5000)
    assert not all(_parses(tokenizer.decode(ids, skip_special_tokens=True), SCHEMA) for ids in free)
    llm.scheduler.check_integrity()


def _parses(text: str, schema: dict) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False


def test_unreachable_schema_ends_with_length_and_bad_schema_is_refused(llm, tokenizer):
    long = {"type": "object", "properties": {"s": {"type": "string", "minLength": 500}}, "required": ["s"]}
    outs, reasons = run(llm.scheduler, [chat_ids(tokenizer, "a poet")],
                        SamplingParams(max_tokens=10, json_schema=json.dumps(long)), first_uid=7000)
    assert reasons == ["length"] and len(outs[0]) == 10
    with pytest.raises(ValueError, match="json_schema"):
        llm.scheduler.add_request(7001, [1, 2, 3], SamplingParams(json_schema='{"type": 5}'))
    assert llm.scheduler.idle
    llm.scheduler.check_integrity()
