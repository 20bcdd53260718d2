"""Chapter 9: `/metrics` (Prometheus text format) and `--skip-tokenizer-init`.

One real server on a config-only tiny Llama (random weights, no tokenizer in its folder: the
situation of Qwen3-0.6B here), started with `--skip-tokenizer-init`. `/metrics` must parse with
prometheus_client's own parser, and its counters must equal what the test sent: requests, prompt
and generated tokens, latency observations, prefix-cache hits.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tiny_model import tiny_model_dir

from minisgl_edu.bench_serve import free_port, wait_healthy
from minisgl_edu.server.metrics import HOP_BUCKETS, HOPS, ITL_BUCKETS, Histogram, ServerMetrics, histogram_family


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> str:
    return tiny_model_dir(str(tmp_path_factory.mktemp("tiny")), vocab=97, max_positions=256)


@pytest.fixture(scope="module")
def url(tiny_path, tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("log") / "serve.log", "wb")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "minisgl_edu.serve", "--model", tiny_path, "--dummy-weights",
                             "--device", "cpu", "--skip-tokenizer-init", "--port", str(port),
                             "--max-total-tokens", "2048", "--max-running-reqs", "16"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, poll=0.3)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def scrape(url: str) -> dict:
    """/metrics as {sample name + labels: value}, through prometheus_client's parser."""
    r = httpx.get(url + "/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}" if s.labels else "")
            out[key] = s.value
    return out


def complete(url: str, prompt: list[int], n: int, stream: bool = False) -> tuple[int, dict | list]:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": stream}
    if not stream:
        r = httpx.post(url + "/v1/completions", json=body, timeout=120)
        return r.status_code, r.json()
    chunks = []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return 200, chunks


# ---- no server -----------------------------------------------------------------------------------
def test_histogram_exports_as_prometheus_clients_own():
    """Our cheap histogram renders the same buckets, count and sum as prometheus_client.Histogram."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client import Histogram as PromHistogram
    values = [0.0005, 0.001, 0.0025, 0.003, 0.02, 0.02, 0.7, 3.0, 99.0]
    reg = CollectorRegistry()
    ref = PromHistogram("ref_seconds", "x", buckets=ITL_BUCKETS, registry=reg)
    ours = Histogram(ITL_BUCKETS)
    for v in values:
        ref.observe(v)
        ours.observe(v)
    want = {s.labels["le"]: s.value for f in text_string_to_metric_families(generate_latest(reg).decode())
            for s in f.samples if s.name == "ref_seconds_bucket"}
    from prometheus_client.core import CollectorRegistry as Reg

    class One:
        def collect(self):
            yield histogram_family("ours_seconds", "x", ours.bounds, {"": (ours.counts, ours.sum)})
    reg2 = Reg()
    reg2.register(One())
    fams = list(text_string_to_metric_families(generate_latest(reg2).decode()))
    got = {s.labels["le"]: s.value for f in fams for s in f.samples if s.name == "ours_seconds_bucket"}
    assert got == want and got["+Inf"] == len(values)
    assert [s.value for f in fams for s in f.samples if s.name == "ours_seconds_sum"] == [pytest.approx(sum(values))]


def test_scheduler_counters_count_each_step_once_list_or_bounded_deque():
    """observe_step counts every launched step once through `steps_done`, from the offline plain list or a
    server rank's bounded deque (which has dropped old steps): the cache hits and each step's phase agree.
    The wrong count (a deque's length instead of steps_done) is kept below and caught."""
    from collections import deque
    from types import SimpleNamespace

    from minisgl_edu.server.metrics import SchedulerCounters
    from minisgl_edu.trace import StepStats
    steps = [StepStats("prefill", 2, 30, 8), None, StepStats("decode", 2, 2, 0, 2), StepStats("prefill", 1, 5, 4),
             StepStats("mixed", 3, 7, 0, 2)]

    def count(stats, done=lambda s: s.steps_done):
        sched, c = SimpleNamespace(stats=stats, steps_done=0), SchedulerCounters()
        for st in steps:  # None: a loop step that launched nothing
            if st is not None:
                stats.append(st)
                sched.steps_done += 1
            sched_view = SimpleNamespace(stats=stats, steps_done=done(sched), engine=SimpleNamespace(graphs=None))
            c.observe_step(sched_view, 0.01)
        return c
    for stats in ([], deque(maxlen=2)):
        c = count(stats)
        assert c.hits == 12 and c.prefill_tokens == 30 + 5 + (7 - 2), type(stats)  # decode rows are no prompt
        assert {p: sum(h.counts) for p, h in c.steps.items()} == {"prefill": 2, "decode": 1, "mixed": 1}
    wrong = count(deque(maxlen=2), done=lambda s: len(s.stats))  # stops counting once the deque is full
    assert wrong.hits != 12


def test_scheduler_counters_count_the_steps_without_a_graph():
    """Steps that ran eagerly are counted by phase where the engine has CUDA graphs, and not at all without them
    (the CPU: every step is eager there, which says nothing); they reach /metrics as a counter by phase."""
    from types import SimpleNamespace

    from minisgl_edu.messages import SchedulerStats
    from minisgl_edu.server.metrics import SchedulerCounters, ServerMetrics
    from minisgl_edu.trace import StepStats
    steps = [StepStats("prefill", 1, 20, 0, 0, False), StepStats("decode", 1, 1, 0, 1, True),
             StepStats("mixed", 5, 90, 0, 1, False), StepStats("mixed", 2, 30, 0, 1, True)]
    for graphs, want in ((object(), {"prefill": 1, "mixed": 1}), (None, {})):
        c, sched = SchedulerCounters(), SimpleNamespace(stats=[], steps_done=0, engine=SimpleNamespace(graphs=graphs))
        for st in steps:
            sched.stats.append(st)
            sched.steps_done += 1
            c.observe_step(sched, 0.002)
        assert c.eager == want
    m = ServerMetrics("tiny")
    m.sched = SchedulerStats(0, 0, 1, 1, 0, 0, 0, [0.1], {}, {}, eager_steps={"mixed": 3})
    text = m.render().decode()
    assert 'minisgl:steps_without_cuda_graph_total{phase="mixed"} 3.0' in text


def emit_since_previous_emission(c, now, uids, finished=()):
    """The wrong emission interval, kept: since the previous emission, whoever was in it. A prefill step without
    decode rows (the CPU's default) hands out only the new request's token; the running ones then look fast."""
    t, before = c.last_emit.get("prev", (None, set()))
    if n := len(set(uids) & before):
        c.emit.observe(now - t, n)
    if uids:
        c.last_emit["prev"] = (now, set(uids))


@pytest.mark.parametrize("observe", ["observe_emit", emit_since_previous_emission])
def test_emit_intervals_count_each_token_since_its_requests_last(observe):
    """The scheduler's emission interval, once per token, since its own request's previous token: a request's
    first token is no interval (its TTFT), a step that skips a request does not shorten its wait, and a finished
    request has no next token."""
    from minisgl_edu.server.metrics import SchedulerCounters
    c = SchedulerCounters()
    emit = c.observe_emit if observe == "observe_emit" else (lambda *a: observe(c, *a))
    emit(0.0, [1, 2])
    emit(0.001, [1, 2])
    emit(0.0015, [3])  # a prefill step: request 3's first token; 1 and 2 wait
    emit(0.003, [1, 2, 3], [2])  # 2 finishes
    emit(0.004, [1, 3])
    # 1: 1, 2, 1 ms; 2: 1, 2 ms; 3: 1.5, 1 ms
    ok = (sum(c.emit.counts), round(c.emit.sum, 6)) == (7, round(0.001 + 0.002 + 0.001 + 0.001 + 0.002 + 0.0015 + 0.001,
                                                               6))
    assert ok == (observe == "observe_emit"), (sum(c.emit.counts), c.emit.sum)


def test_server_metrics_count_what_the_replies_say():
    from minisgl_edu.messages import UserReply
    m = ServerMetrics("x")
    m.opened(1)
    m.opened(2)
    m.on_reply(UserReply(1, "a", False, None, 10, 1), 1.0)
    m.on_reply(UserReply(1, "bc", True, "length", 10, 3), 2.0)  # two tokens in one (coalesced) reply
    m.on_reply(UserReply(2, "", True, "abort", 4, 0), 1.5)
    m.on_reply(UserReply(3, "?", False, None, 1, 1), 1.5)  # never opened (e.g. a stats query): ignored
    assert (m.generation_tokens, m.prompt_tokens, m.finished) == (3, 14, {"length": 1, "abort": 1})
    assert sum(m.ttft.counts) == 1 and sum(m.itl.counts) == 2 and m.itl.sum == pytest.approx(1.0)
    assert not m.timing


def test_reply_hops_time_each_leg_of_a_steps_way():
    """ServerMetrics.on_hops: the three legs of a stamped ReplyColumns, each in its own bucket; an unstamped one
    (--naive-stream's replies, another sender) is not counted."""
    from minisgl_edu.messages import ReplyColumns
    m = ServerMetrics("x")
    m.on_hops(ReplyColumns([1], ["a"], [2], sent=10.0, detok_in=10.0003, detok_out=10.00042), 10.0012)
    m.on_hops(ReplyColumns([1], ["b"], [3]), 11.0)
    legs = {h: m.hops[h] for h in HOPS}
    assert [sum(h.counts) for h in legs.values()] == [1, 1, 1]
    for h, want in zip(HOPS, (0.0003, 0.00012, 0.00078)):
        assert legs[h].sum == pytest.approx(want)
        i = next(k for k, c in enumerate(legs[h].counts) if c)
        assert HOP_BUCKETS[i - 1] < want <= HOP_BUCKETS[i]


def test_a_stalled_hop_is_logged_once_a_second(caplog):
    """A step's replies that waited longer than MINISGL_STALL_LOG_MS (20 ms) in one hop are logged with the hop's
    name, at most once a second (a stall lasting many steps logs once); a normal step is not."""
    import logging

    from minisgl_edu.messages import ReplyColumns
    from minisgl_edu.server.common import STALL_LOG_MS
    assert STALL_LOG_MS == 20 or "MINISGL_STALL_LOG_MS" in os.environ
    m = ServerMetrics("x")
    with caplog.at_level(logging.WARNING, logger="minisgl_edu"):
        m.on_hops(ReplyColumns([1], ["a"], [2], sent=10.0, detok_in=10.0003, detok_out=10.0004), 10.0012)
        assert not caplog.records
        m.on_hops(ReplyColumns([1, 2], ["a", "b"], [3, 3], sent=20.0, detok_in=20.0003, detok_out=20.0004), 20.0354)
        m.on_hops(ReplyColumns([1], ["c"], [4], sent=20.5, detok_in=20.58, detok_out=20.581), 20.582)  # < 1 s later
        assert len(caplog.records) == 1 and "detokenizer_to_api" in caplog.text and "35.0 ms" in caplog.text
        m.on_hops(ReplyColumns([1], ["d"], [5], sent=21.5, detok_in=21.58, detok_out=21.581), 21.582)
        assert len(caplog.records) == 2 and "scheduler_to_detokenizer" in caplog.records[1].getMessage()


def plain_float_ms(name: str, default: float) -> float:
    """The wrong reader the test below catches: float() of the variable, whose error does not say which one."""
    return float(os.environ.get(name, default))


def test_stall_thresholds_refuse_bad_values_by_name(monkeypatch):
    """MINISGL_GC_LOG_MS and MINISGL_STALL_LOG_MS: a number >= 0 (0: no log); anything else is refused naming the
    variable, at the server's start (the modules read them as they are imported)."""
    from minisgl_edu.server.common import env_ms
    monkeypatch.setenv("MINISGL_STALL_LOG_MS", "7.5")
    assert env_ms("MINISGL_STALL_LOG_MS", 20.0) == 7.5
    monkeypatch.delenv("MINISGL_STALL_LOG_MS")
    assert env_ms("MINISGL_STALL_LOG_MS", 20.0) == 20.0
    for bad in ("fast", "-1", "nan", ""):
        monkeypatch.setenv("MINISGL_STALL_LOG_MS", bad)
        for reader, names_it in ((env_ms, True), (plain_float_ms, False)):
            try:
                reader("MINISGL_STALL_LOG_MS", 20.0)
                said = ""  # accepted: the wrong reader takes "-1" and "nan"
            except ValueError as e:
                said = str(e)
            assert ("MINISGL_STALL_LOG_MS" in said) is names_it, (bad, reader.__name__, said)


def test_a_slow_detokenizer_wake_names_the_longest_hold():
    """The detokenizer's log line for a slow wake (tokenizer.slow_wake) says what it held: the longest hold and
    which request, and the longest window its decodes covered."""
    from minisgl_edu.server.tokenizer import DecodeState, slow_wake
    states = {7: DecodeState(ids=list(range(50)), prefix_offset=0, read_offset=48),
              9: DecodeState(ids=list(range(900)), prefix_offset=10, read_offset=12)}
    line = slow_wake(states, [object()] * 3, 0.085)
    assert "85.0 ms" in line and "3 messages" in line and "2 requests" in line
    assert "longest hold 888 tokens (uid 9)" in line and "longest window 890 tokens" in line
    assert "longest hold 0 tokens" in slow_wake({}, [], 0.03)


# ---- the real server -----------------------------------------------------------------------------
def test_metrics_counters_agree_with_the_requests_sent(url):
    before = scrape(url)
    assert before.get("minisgl:generation_tokens_total", 0) == 0
    prompts = [[10 + i] + [(7 * i + j) % 90 + 5 for j in range(8 + 6 * i)] for i in range(3)]  # distinct first ids
    lens = [5, 6, 7]
    for p, n in zip(prompts, lens):
        code, body = complete(url, p, n)
        assert code == 200 and body["usage"] == {"prompt_tokens": len(p), "completion_tokens": n,
                                                 "total_tokens": len(p) + n}
    _, chunks = complete(url, prompts[0], 4, stream=True)  # the same prompt again: a radix hit
    m = scrape(url)
    sent_prompt = sum(map(len, prompts)) + len(prompts[0])
    sent_gen = sum(lens) + 4
    assert m["minisgl:prompt_tokens_total"] == sent_prompt
    assert m["minisgl:generation_tokens_total"] == sent_gen
    assert m["minisgl:request_success_total{finished_reason=length}"] == 4
    assert m["minisgl:time_to_first_token_seconds_count"] == 4 == m["minisgl:e2e_request_latency_seconds_count"]
    assert m["minisgl:inter_token_latency_seconds_count"] == sent_gen - 4
    assert m["minisgl:emit_interval_seconds_count"] == sent_gen - 4  # the same intervals, at the scheduler
    for hop in HOPS:  # one ReplyColumns per step with a plain token: all of each request's tokens but its last
        assert m[f"minisgl:reply_hop_seconds_count{{hop={hop}}}"] == sent_gen - 4
    assert m["minisgl:prefix_cache_queries_total"] == sent_prompt
    assert m["minisgl:prefix_cache_hits_total"] == len(prompts[0]) - 1  # all but the last prompt token
    assert m["minisgl:cache_hit_rate"] == pytest.approx((len(prompts[0]) - 1) / sent_prompt)
    assert m["minisgl:num_requests_running"] == 0 == m["minisgl:num_requests_waiting"]
    assert m["minisgl:kv_cache_usage_perc"] == 0  # nothing held: every page free or evictable
    assert m["minisgl:kv_pages_free"] + m["minisgl:kv_pages_evictable"] == m["minisgl:kv_pages_total"]
    assert m["minisgl:step_time_seconds_count{phase=prefill}"] == 4
    assert m["minisgl:step_time_seconds_count{phase=decode}"] == sent_gen - 4
    assert m["minisgl:step_time_seconds_bucket{le=+Inf,phase=decode}"] == sent_gen - 4


def test_skip_tokenizer_init_ids_in_ids_out(url, tiny_path):
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = httpx.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "stop": "x"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
    prompt = [3, 14, 15, 92, 65, 35, 89, 79]
    _, body = complete(url, prompt, 12)
    choice = body["choices"][0]
    assert choice["text"] == "" and len(choice["token_ids"]) == 12
    _, chunks = complete(url, prompt, 12, stream=True)
    streamed = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids", [])]
    assert streamed == choice["token_ids"]
    from minisgl_edu import LLM, SamplingParams
    llm = LLM(tiny_path, device="cpu", dummy_weights=True)  # the same seeded random weights, no ZMQ
    expect = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True), use_tqdm=False)
    assert choice["token_ids"] == expect[0]["token_ids"]
