"""The step trace on CUDA: forward spans come from CUDA events on the engine stream (chapter 6)."""
from __future__ import annotations

import json

import pytest

from minisgl_edu import LLM, SamplingParams
from minisgl_edu.trace import CPU_TID, DEVICE_TID, validate_trace

from .gpu_helpers import CONFIGS, report


@pytest.mark.parametrize("overlap", [False, True])
def test_cuda_trace_places_forwards_on_the_device_track(tmp_path, overlap):
    path = str(tmp_path / "steps.json")
    llm = LLM(str(CONFIGS / "smollm2-135m"), device="cuda", dummy_weights=True, trace=path, overlap=overlap,
              cuda_graph_max_bs=8, max_total_tokens=16384)
    prompts = [[(7 * i + j) % 1000 + 1 for j in range(40 + 8 * i)] for i in range(6)]
    llm.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)
    with open(path) as f:
        obj = json.load(f)
    validate_trace(obj)
    stats = llm.scheduler.stats
    spans = [e for e in obj["traceEvents"] if e["ph"] == "X" and "step" in e["args"]]
    fwd = sorted((e for e in spans if e["name"] == "forward"), key=lambda e: e["args"]["step"])
    assert [e["args"]["step"] for e in fwd] == list(range(len(stats)))
    assert all(e["tid"] == DEVICE_TID and e["dur"] > 0 for e in fwd)
    assert [(e["args"]["phase"], e["args"]["batch_size"]) for e in fwd] == [(s.phase, s.batch_size) for s in stats]
    launch = {e["args"]["step"]: e for e in spans if e["name"] == "launch"}
    for a, b in zip(fwd, fwd[1:]):  # one engine stream: forwards run one after another
        assert a["ts"] + a["dur"] <= b["ts"] + 5.0, (a, b)  # µs: two clocks paired once, allow a little drift
    for e in fwd:  # the device cannot start a step before the CPU began launching it
        assert e["ts"] >= launch[e["args"]["step"]]["ts"] - 5.0
    cpu = sorted((e for e in obj["traceEvents"] if e["ph"] == "X" and e["tid"] == CPU_TID), key=lambda e: e["ts"])
    for a, b in zip(cpu, cpu[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
    decode = [e for e in fwd if e["args"]["phase"] == "decode"]
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(decode, decode[1:])]
    report(check="step trace on CUDA", overlap=overlap, steps=len(stats),
           median_decode_gap_us=sorted(gaps)[len(gaps) // 2] if gaps else None)
