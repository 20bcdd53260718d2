"""Chapter 9's constrained-decoding table: the grammar mask of the first steps of one real request.

Runs the default model on the CPU, greedy, with a small JSON schema, and prints a Markdown table:
per step, how many of the vocabulary's tokens the mask allows, the model's three favourite tokens
(raw logits) marked allowed or masked, and the token drawn. Usage: python3 scripts/grammar_mask_table.py
"""
from __future__ import annotations

import json

import torch

import minisgl_edu.engine as engine_mod
from minisgl_edu import LLM, SamplingParams
from minisgl_edu.default_model import default_model_path

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "rain": {"type": "boolean"}},
          "required": ["city", "rain"], "additionalProperties": False}
STEPS = 10


def main() -> None:
    llm = LLM(default_model_path(), device="cpu")
    tok = llm.tokenizer
    seen = []
    real = engine_mod.apply_controls

    def record(logits, st, pool):  # the engine's call, watched: raw logits and the mask of row 0
        seen.append((logits[0].clone(), None if st.allowed is None else st.allowed[0].clone()))
        return real(logits, st, pool)
    engine_mod.apply_controls = record
    msgs = [{"role": "user", "content": "What is the weather in Paris? Answer in JSON."}]
    ids = list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
    req = llm.scheduler.add_request(0, ids, SamplingParams(max_tokens=40, json_schema=json.dumps(SCHEMA)))
    while not llm.scheduler.idle:
        llm.scheduler.step()
    show = lambda t: repr(tok.decode([t]))
    print(f"schema: `{json.dumps(SCHEMA)}`\n")
    print("| step | allowed tokens | model's top 3 (raw logits): ✓ allowed, ✗ masked | drawn |")
    print("| --- | --- | --- | --- |")
    for step, ((logits, allowed), chosen) in enumerate(zip(seen[:STEPS], req.output_ids)):
        top = torch.softmax(logits, -1).topk(3)
        cells = ", ".join(f"{show(t)} {p:.2f} {'✓' if allowed[t] else '✗'}" for p, t in
                          zip(top.values.tolist(), top.indices.tolist()))
        print(f"| {step} | {int(allowed.sum())} / {allowed.numel()} | {cells} | {show(chosen)} |")
    print(f"\noutput: `{tok.decode(req.output_ids, skip_special_tokens=True)}` ({req.finish_reason})")


if __name__ == "__main__":
    main()
