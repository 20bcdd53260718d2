"""The step trace (chapter 6): `LLM(trace=PATH)` writes trace-event JSON with one span set per step."""
from __future__ import annotations

import json
import os

import pytest

from minisgl_edu import SamplingParams
from minisgl_edu.trace import CPU_TID, DEVICE_TID, Tracer, validate_trace
from tiny_model import one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],  # 20 tokens: chunked at 8
           [5, 6, 7], [5, 6, 7, 8, 9]]


@pytest.mark.parametrize("overlap", [False, True])
def test_trace_has_one_span_set_per_step(tmp_path, overlap):
    path = str(tmp_path / "steps.json")
    llm = tiny_llm(tiny_model_dir(str(tmp_path)), trace=path, overlap=overlap, max_prefill_tokens=8)
    out = llm.generate(PROMPTS, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    assert [len(o["token_ids"]) for o in out] == [4, 4, 4]
    with open(path) as f:
        obj = json.load(f)
    validate_trace(obj)
    stats = llm.scheduler.stats
    assert any(st.phase == "prefill" and st.tokens == 8 for st in stats)  # the long prompt was chunked
    spans = [e for e in obj["traceEvents"] if e["ph"] == "X" and "step" in e["args"]]
    for name, tid in (("schedule", CPU_TID), ("launch", CPU_TID), ("forward", DEVICE_TID), ("process", CPU_TID)):
        mine = sorted((e for e in spans if e["name"] == name), key=lambda e: e["args"]["step"])
        assert [e["args"]["step"] for e in mine] == list(range(len(stats))), name  # once per step, each step
        for e, st in zip(mine, stats):
            assert e["tid"] == tid
            assert (e["args"]["phase"], e["args"]["batch_size"], e["args"]["tokens"], e["args"]["cache_hit_tokens"]) \
                == (st.phase, st.batch_size, st.tokens, st.cache_hit_tokens)
    cpu = sorted((e for e in obj["traceEvents"] if e["ph"] == "X" and e["tid"] == CPU_TID), key=lambda e: e["ts"])
    for a, b in zip(cpu, cpu[1:]):  # one thread does these in turn: no two CPU spans overlap
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (a, b)
    # on the CPU the forward runs inside its launch span
    launch = {e["args"]["step"]: e for e in spans if e["name"] == "launch"}
    for e in (e for e in spans if e["name"] == "forward"):
        l = launch[e["args"]["step"]]
        assert l["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= l["ts"] + l["dur"] + 1e-3


def test_cache_hits_reach_the_trace(tmp_path):
    path = str(tmp_path / "steps.json")
    llm = tiny_llm(tiny_model_dir(str(tmp_path)), trace=path, overlap=False)
    llm.generate([PROMPTS[0]], SamplingParams(max_tokens=2), use_tqdm=False)
    llm.generate([PROMPTS[0][:16] + [30, 31]], SamplingParams(max_tokens=2), use_tqdm=False)  # shares 16 tokens
    with open(path) as f:
        obj = json.load(f)
    prefills = [e["args"] for e in obj["traceEvents"] if e["name"] == "schedule" and e["args"].get("phase") == "prefill"]
    assert [a["cache_hit_tokens"] for a in prefills] == [0, 16]
    assert [a["tokens"] for a in prefills] == [20, 2]


def decode_graphs_only(batch) -> bool:
    """A wrong Batch.in_graph the test below catches: a prompt-only graph pads its rows, not its batch size."""
    return batch.padded_size > 0


@pytest.mark.parametrize("wrong", [False, True])
def test_the_trace_says_which_steps_replayed_a_graph(tmp_path, monkeypatch, wrong):
    """Each launched step's `graph` (StepStats, the launch and forward spans; not in its schedule span): False for
    an eager step (every step on the CPU), True where the engine replayed one: here an engine that pads as a graph
    would, its decode steps to a batch size and its prompt-only steps to a row capacity (Engine._forward sets
    padded_size / padded_tokens exactly when a graph runs). The wrong twin misses the prompt-only graphs."""
    from minisgl_edu.engine import Engine
    from minisgl_edu.req import Batch
    if wrong:
        monkeypatch.setattr(Batch, "in_graph", property(decode_graphs_only))
    path = str(tmp_path / "steps.json")
    llm = tiny_llm(tiny_model_dir(str(tmp_path)), trace=path, overlap=False)
    llm.generate([PROMPTS[0]], SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    assert [st.graph for st in llm.scheduler.stats] == [False] * 3
    plain = Engine._forward

    def pretend(self, batch):  # what a graph replay leaves on the batch; the forward itself stays eager
        out = plain(self, batch)
        if batch.is_prefill:
            batch.padded_tokens = 256  # a prompt-only graph: its rows padded, no decode rows
        else:
            batch.padded_size = batch.size
        return out
    monkeypatch.setattr(Engine, "_forward", pretend)
    llm.generate([PROMPTS[1]], SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    stats = list(llm.scheduler.stats)[3:]
    want = [("prefill", True), ("decode", True), ("decode", True)]
    with open(path) as f:
        obj = json.load(f)
    forward = sorted((e["args"]["step"], e["args"]["graph"]) for e in obj["traceEvents"] if e["name"] == "forward")
    schedule = [e["args"] for e in obj["traceEvents"] if e["name"] == "schedule"]
    assert len(schedule) == 6 and not any("graph" in a for a in schedule)  # not launched yet: not known
    if wrong:
        assert [(st.phase, st.graph) for st in stats] != want  # the prompt-only graph read as eager: caught
        return
    assert [(st.phase, st.graph) for st in stats] == want
    assert [g for _, g in forward] == [False] * 3 + [True] * 3


def test_validate_trace_rejects_malformed():
    t = Tracer()
    with t.span("x", batch_size=1):
        pass
    validate_trace(t.to_json())
    for bad in ({}, {"traceEvents": [{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0.0, "dur": -1.0}]},
                {"traceEvents": [{"ph": "B", "name": "x", "pid": 1, "tid": 1, "ts": 0.0}]}):
        with pytest.raises(AssertionError):
            validate_trace(bad)


def test_serve_trace_and_hop_log(tmp_path, model_path):
    """`serve --trace` writes rank 0's step trace at shutdown; `--hop-log` keeps the per-hop JSON lines."""
    import httpx
    from test_server import Server
    from transformers import AutoConfig
    vocab = AutoConfig.from_pretrained(model_path).vocab_size
    path = tiny_model_dir(str(tmp_path), vocab=vocab, tokenizer_from=model_path)
    steps, hops = str(tmp_path / "steps.json"), str(tmp_path / "hops.jsonl")
    s = Server("--model", path, "--dummy-weights", "--device", "cpu", "--trace", steps, "--hop-log", hops)
    try:
        r = httpx.post(s.url + "/v1/completions", json={"model": os.path.basename(path), "prompt": "Hello there",
                                                        "max_tokens": 3, "ignore_eos": True}, timeout=120)
        assert r.status_code == 200, r.text
    finally:
        s.stop()
    assert s.proc.returncode == 0
    with open(steps) as f:
        obj = json.load(f)
    validate_trace(obj)
    names = [e["name"] for e in obj["traceEvents"] if e["ph"] == "X"]
    assert names.count("forward") == 3 and names.count("schedule") >= 3 and "receive" in names  # 1 prefill + 2 decodes
    with open(hops) as f:
        assert {json.loads(line)["proc"] for line in f} >= {"api", "scheduler-rank0", "detokenizer"}


def test_one_timeline_for_the_tracer_and_the_benchmarks(tmp_path):
    """Tracing is a hook on one scheduler object (the class stays untraced), and Engine.timeline is the one
    record of step times: bench.timeline_stats and aligned_timeline read the same entries the tracer does."""
    from minisgl_edu.bench import aligned_timeline, timeline_stats
    from minisgl_edu.scheduler import Scheduler
    from minisgl_edu.trace import Timeline
    llm = tiny_llm(tiny_model_dir(str(tmp_path)), trace=str(tmp_path / "steps.json"), overlap=False)
    sched = llm.scheduler
    assert type(sched) is Scheduler and {"schedule", "launch", "process"} <= set(vars(sched))  # the instance's own
    llm.engine.timeline = tl = Timeline(llm.engine.device)
    llm.generate(PROMPTS, SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)
    steps = tl.steps()
    assert len(steps) == len(sched.stats) > 1
    for t in steps:  # on the CPU the forward runs on the host: its device times are its CPU times
        assert t.cpu_start <= t.cpu_end and (t.device_start, t.device_end) == (t.cpu_start, t.cpu_end)
    for a, b in zip(steps, steps[1:]):
        assert a.cpu_end <= b.cpu_start
    rel = aligned_timeline(tl, 1)
    assert rel[0].cpu_start == 0 and len(rel) == len(steps) - 1
    assert rel[-1].cpu_end == pytest.approx(steps[-1].cpu_end - steps[1].cpu_start)
    st = timeline_stats(tl, 1)
    assert st.steps == len(steps) - 1 and len(st.gap_ms) == st.steps - 1 and 0 <= st.idle_share < 1
    with open(llm.tracer.save()) as f:
        fwd = sorted((e for e in json.load(f)["traceEvents"] if e["name"] == "forward"), key=lambda e: e["args"]["step"])
    assert [e["dur"] for e in fwd] == pytest.approx([(t.cpu_end - t.cpu_start) * 1e6 for t in steps], abs=0.01)


def test_detail_spans_nest_in_their_launch(tmp_path, monkeypatch):
    """MINISGL_TRACE_DETAIL's spans (a launch's own phases) lie inside the launch span of their step, and
    benchmarks/trace_phases.py sums them per launch; an early admission (overlap loop) has its own span."""
    import sys

    import minisgl_edu.trace as trace_mod
    monkeypatch.setattr(trace_mod, "DETAIL", True)
    path = str(tmp_path / "detail.json")
    llm = tiny_llm(tiny_model_dir(str(tmp_path)), trace=path, overlap=True, early_admit=True,
                  max_prefill_tokens=8)
    llm.generate(PROMPTS, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    with open(path) as f:
        obj = json.load(f)
    validate_trace(obj)
    cpu = [e for e in obj["traceEvents"] if e["ph"] == "X" and e["tid"] == CPU_TID]
    launches = [e for e in cpu if e["name"] == "launch"]
    detail = [e for e in cpu if e["name"] in ("assign_locations", "prepare", "backend.prepare", "backend.plan", "logits")]
    assert {e["name"] for e in detail} >= {"assign_locations", "prepare", "logits"}
    for e in detail:  # each inside exactly one launch
        assert sum(l["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= l["ts"] + l["dur"] + 1e-3 for l in launches) == 1, e
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    from trace_phases import phases
    rows = phases(obj["traceEvents"])
    assert sum(len(r["launch"]) for p, r in rows.items() if p != "(wait)") == len(launches)
    assert rows["(wait)"]["admit early"]  # the chunked prompt's next chunk, admitted while a step's tokens travelled
    assert all(0 <= x for r in rows.values() for v in r.values() for x in v)
