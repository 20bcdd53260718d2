"""Chapter 9: the serving benchmark (`python -m minisgl_edu.bench serve`) and the server's fast paths.

* the datasets: `random` is the anchors' workload; the others have the shapes they promise;
* the fast streaming paths equal their naive twins: the batched detokenizer == `detokenize_next`,
  coalesced replies == the replies one by one, columnar messages == one message per token, SSE chunk
  templates == the encoded bodies, the raw HTTP client == httpx (on the stub servers);
* against stub servers that answer 500, end a stream without [DONE] or drop the connection, every
  such request is counted as failed (and the good ones as completed);
* against the real CPU server (default model), a small run completes with zero failures and the
  token counts the server reports;
* the raw client times each event by its arrival (the kernel's receive stamp), not by when its busy loop read it.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import socket
import sys
import threading
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from minisgl_edu import bench, bench_serve
from minisgl_edu.bench_serve import (BenchRequest, arrival_times, free_port, parse_args, parse_sse_line,
                                     random_requests, run_load, run_load_sharded, shard, shared_prefix_requests, sharegpt_like_requests,
                                     stats_ms, summarize, unshard)
from minisgl_edu.messages import UserReply
from minisgl_edu.server.api import merge_replies
from minisgl_edu.server.tokenizer import (DecodeState, batch_decoder, detokenize_batch, detokenize_next,
                                          detokenize_step, detokenize_wake, skipped_ids)


# ---- datasets ------------------------------------------------------------------------------------
def test_random_dataset_is_the_anchors_workload():
    prompts, outputs = bench.anchors_workload(32, seed=3)
    reqs = random_requests(32, seed=3)
    assert [r.prompt for r in reqs] == prompts and [r.output_len for r in reqs] == outputs
    small = random_requests(50, 1, (5, 9), (2, 4))
    assert all(5 <= r.prompt_len <= 9 and 2 <= r.output_len <= 4 for r in small)


def test_shared_prefix_and_sharegpt_shapes():
    reqs = shared_prefix_requests(12, groups=3, system_len=40, question_len=(2, 5), output_len=(1, 2))
    for i, r in enumerate(reqs):
        assert r.prompt[:40] == reqs[i % 3].prompt[:40] and 42 <= r.prompt_len <= 45
    assert len({tuple(r.prompt[:40]) for r in reqs}) == 3
    mix = sharegpt_like_requests(400, seed=0, input_len=(4, 2048), output_len=(4, 1024))
    lens = sorted(r.prompt_len for r in mix)
    assert 4 <= lens[0] and lens[-1] <= 2048
    assert lens[len(lens) // 2] < 200 < lens[int(0.95 * len(lens))]  # many short prompts, a long tail


def test_percentiles_match_numpy():
    import numpy as np
    xs = [random.Random(0).random() for _ in range(101)]
    s = stats_ms(xs)
    for k, q in (("median", 50), ("p90", 90), ("p99", 99)):
        assert s[k] == pytest.approx(1e3 * np.percentile(xs, q))


# ---- the fast paths equal their naive twins -------------------------------------------------------
def test_batched_detokenizer_equals_detokenize_next(tokenizer):
    rng = random.Random(0)
    texts = ["Tokyo is 東京 (日本語) 🙂 — déjà vu, naïve café.", "  two  spaces\tand\nlines", "plain ascii text here"]
    seqs = [tokenizer.encode(t) for t in texts] + [[rng.randrange(tokenizer.vocab_size) for _ in range(30)]
                                                   for _ in range(3)]
    assert batch_decoder(tokenizer) is not None, "the default model has a fast tokenizer: the batch path runs"
    naive, fast = [DecodeState() for _ in seqs], [DecodeState() for _ in seqs]
    out_naive, out_fast = [[] for _ in seqs], [[] for _ in seqs]
    for step in range(max(map(len, seqs))):
        live = [i for i, s in enumerate(seqs) if step < len(s)]
        finals = [step == len(seqs[i]) - 1 for i in live]
        for i, f in zip(live, finals):
            out_naive[i].append(detokenize_next(tokenizer, naive[i], seqs[i][step], f))
        got = detokenize_batch(tokenizer, [fast[i] for i in live], [seqs[i][step] for i in live], finals)
        for i, g in zip(live, got):
            out_fast[i].append(g)
    assert out_fast == out_naive
    assert "".join(out_fast[0]) == texts[0]
    assert sum(p == "" for p in out_fast[0]) >= 2  # half characters were held back, as the twin does


def test_detokenize_step_fast_equals_naive_with_two_steps_in_one_batch(tokenizer):
    """The detokenizer may receive two steps' DetokenizeMsgs at once: same uid twice, in order."""
    from minisgl_edu.messages import DetokenizeMsg
    a, b = tokenizer.encode("日本 🙂 ok"), tokenizer.encode("hello there world")
    msgs = [DetokenizeMsg(1, a[0], False, prompt_tokens=3), DetokenizeMsg(2, b[0], False),
            DetokenizeMsg(1, a[1], False), DetokenizeMsg(3, -1, True, "error", error="no", status=400),
            DetokenizeMsg(1, a[2], False), DetokenizeMsg(2, b[1], True, "length")]
    outs = {}
    for naive in (True, False):
        outs[naive] = [(r.uid, r.incremental_output, r.completion_tokens, r.finished, r.error)
                       for r in detokenize_step(tokenizer, {}, msgs, naive)]
    assert outs[True] == outs[False]
    assert [c for uid, _, c, _, _ in outs[False] if uid == 1] == [1, 2, 3]  # each reply counts its own tokens
    ids_only = detokenize_step(None, {}, msgs, False)  # --skip-tokenizer-init
    assert [r.output_ids for r in ids_only if r.uid == 1] == [[a[0]], [a[1]], [a[2]]]
    assert all(r.incremental_output == "" for r in ids_only)


def test_coalesced_replies_equal_the_replies_one_by_one():
    replies = [UserReply(7, "a", False, None, 3, 1, warning="w"), UserReply(7, "b", False, None, 3, 2),
               UserReply(7, "", False, None, 3, 3), UserReply(7, "cd", True, "length", 3, 4)]
    merged = replies[0]
    for r in replies[1:]:
        merged = merge_replies(merged, r)
    assert (merged.incremental_output, merged.finished, merged.finish_reason, merged.completion_tokens,
            merged.prompt_tokens, merged.warning) == ("abcd", True, "length", 4, 3, "w")
    ids = merge_replies(UserReply(1, "", False, output_ids=[5]), UserReply(1, "", True, "stop", output_ids=[6, 7]))
    assert ids.output_ids == [5, 6, 7]


def reply_path(tokenizer, steps: list[list], fast: bool, expand: bool = False, wake=detokenize_wake) -> list[tuple]:
    """Each step's TokenOutputs through the scheduler's, the detokenizer's and the API's message code (encoded and
    decoded at both hops, two steps per detokenizer batch); the replies the API would queue, per uid in order.
    `expand`: the detokenizer as it was before columns went through it (each token a DetokenizeMsg and a UserReply)."""
    from minisgl_edu.messages import (BatchFrontendMsg, BatchTokenizerMsg, decode, encode, reply_columns, unbatch,
                                      unbatch_rows)
    from minisgl_edu.server.scheduler_proc import token_replies
    states, out = {}, []
    for pair in (steps[i:i + 2] for i in range(0, len(steps), 2)):
        raws = [encode(BatchTokenizerMsg(token_replies(outs, fast))) for outs in pair]
        if expand:
            msgs = [m for raw in raws for m in unbatch_rows(decode(raw))]
            wire = BatchFrontendMsg(reply_columns(detokenize_step(tokenizer, states, msgs, False)))
        else:  # the detokenizer's own function, as its loop calls it
            wire = BatchFrontendMsg(wake(tokenizer, states, [m for r in raws for m in unbatch(decode(r))], not fast))
        out += [(r.uid, r.incremental_output, r.completion_tokens, r.finished, r.finish_reason, r.output_ids,
                 r.warning, r.logprobs, r.error, r.prompt_tokens if r.finished else None)
                for r in unbatch_rows(decode(encode(wire)))]
    return sorted(out, key=lambda r: r[0])  # each uid's order as sent (a stable sort): requests' queues are apart


def test_columns_on_the_reply_path_equal_one_message_per_token(tokenizer):
    """TokenColumns / ReplyColumns (a step's plain tokens as one message) give each request the same replies,
    in the same order, as one DetokenizeMsg / UserReply per token (--naive-stream), text and token ids alike."""
    from minisgl_edu.messages import ReplyColumns, TokenColumns, reply_columns
    from minisgl_edu.scheduler import TokenOutput
    from minisgl_edu.server.scheduler_proc import token_replies
    seqs = [tokenizer.encode(t) for t in ("東京 (日本語) 🙂 déjà", "plain words only here", "a b c d e f g h")]
    steps = [[TokenOutput(uid, s[k], k == len(s) - 1, "length" if k == len(s) - 1 else None, None, 7,
                          clamped=uid == 2 and k == 0) for uid, s in enumerate(seqs) if k < len(s)]
             for k in range(max(map(len, seqs)))]
    fast, naive = reply_path(tokenizer, steps, True), reply_path(tokenizer, steps, False)
    assert fast == naive
    assert "".join(r[1] for r in fast if r[0] == 0) == "東京 (日本語) 🙂 déjà"
    assert isinstance(token_replies(steps[1], True)[0], TokenColumns)  # the columns did run
    assert reply_path(None, steps, True) == reply_path(None, steps, False)  # --skip-tokenizer-init: token ids
    mixed = [UserReply(1, "a", False, None, 0, 1), UserReply(1, "b", False, None, 0, 2, warning="w"),
             UserReply(2, "c", False, None, 0, 1), UserReply(1, "d", False, None, 0, 3)]
    cols = reply_columns(mixed)  # uid 1's third reply must not overtake its second
    assert isinstance(cols[0], ReplyColumns) and cols[0].uids == [1, 2]
    assert [r.incremental_output for r in cols[0].rows() + cols[1:] if r.uid == 1] == ["a", "b", "d"]


def random_stream(tokenizer, seed: int, live: int = 12, steps: int = 40) -> list[list]:
    """Steps of TokenOutputs: ids from text whose characters span tokens (emoji, CJK), special tokens and the whole
    vocabulary, requests finishing at random lengths (new ones take their place), some with logprobs or a clamped
    first token."""
    from minisgl_edu.scheduler import TokenOutput
    rng = random.Random(seed)
    pool = tokenizer.encode("東京 (日本語) 🙂🚀 déjà vu — 北京欢迎你 ✨ 한국어")
    specials = sorted(skipped_ids(tokenizer)) or [0]
    left = {uid: rng.randint(1, 15) for uid in range(live)}
    first, out, next_uid = set(), [], live
    for _ in range(steps):
        step = []
        for uid in list(left):
            left[uid] -= 1
            fin = left[uid] == 0
            lp = (-0.5, [pool[0], 7], [-0.5, -2.0]) if uid % 5 == 1 and rng.random() < 0.3 else None
            r = rng.random()  # text, a special token (which the decode skips), any token
            t = rng.choice(pool) if r < 0.6 else rng.choice(specials) if r < 0.75 else \
                rng.randrange(tokenizer.vocab_size)
            step.append(TokenOutput(uid, t, fin, rng.choice(["stop", "length"]) if fin else None, lp, 9,
                                    clamped=uid % 4 == 3 and uid not in first))
            first.add(uid)
            if fin:
                del left[uid]
                left[next_uid], next_uid = rng.randint(1, 15), next_uid + 1  # uids are never reused
        out.append(step)
    return out


def columns_first(tok, states, msgs, naive):
    """A wrong detokenizer that the test below must catch: a wake-up's TokenColumns before its DetokenizeMsgs."""
    from minisgl_edu.messages import TokenColumns
    cols = [m for m in msgs if isinstance(m, TokenColumns)]
    return detokenize_wake(tok, states, cols + [m for m in msgs if not isinstance(m, TokenColumns)], naive)


def test_detokenizer_columns_equal_the_per_token_twin_on_a_random_stream(tokenizer):
    """A step's TokenColumns straight to ReplyColumns (no object per token) gives every request the same replies,
    in order, as the per-token twin (--naive-stream) and as the columns expanded into messages; two steps per
    wake-up, so one uid's tokens of two steps meet in one batch (also across a clamped or logprob token)."""
    from minisgl_edu.messages import DetokenizeMsg, ReplyColumns, TokenColumns
    for seed in range(3):
        steps = random_stream(tokenizer, seed)
        naive, fast = reply_path(tokenizer, steps, False), reply_path(tokenizer, steps, True)
        assert fast == naive and reply_path(tokenizer, steps, True, expand=True) == naive
        text = {}
        for r in naive:
            text[r[0]] = text.get(r[0], "") + r[1]
        for uid, ids in ((o.uid, [x.token_id for s in steps for x in s if x.uid == o.uid]) for s in steps for o in s
                         if o.finished):  # a finished request's text is its tokens' text, whole characters
            assert text[uid] == tokenizer.decode(ids, skip_special_tokens=True)
        assert reply_path(None, steps, True) == reply_path(None, steps, False)  # --skip-tokenizer-init: the ids
        assert reply_path(tokenizer, steps, True, wake=columns_first) != naive  # a uid's tokens out of order
    assert any("\ufffd" not in t and len(t.encode()) > len(t) for t in text.values())  # multi-byte text did pass
    smile = tokenizer.encode("🙂")
    assert len(smile) == 2  # two tokens, half a character each
    msgs = [TokenColumns([1, 2], [smile[0], smile[0]]), DetokenizeMsg(1, smile[1], True, "stop", 3),
            TokenColumns([2], [smile[1]])]
    out = detokenize_wake(tokenizer, {}, msgs, False)  # columns stay columns, in the order they came
    assert [type(m) for m in out] == [ReplyColumns, UserReply, ReplyColumns]
    assert out[0].texts == ["", ""] and out[1].incremental_output == "🙂" and out[2].texts == ["🙂"]
    assert (out[0].completion_tokens, out[1].completion_tokens, out[2].completion_tokens) == ([1, 1], 2, [2])


def test_sse_chunk_templates_equal_the_encoded_bodies():
    from minisgl_edu.server.api import ChunkTemplate, event
    from minisgl_edu.server.protocol import chunk_body
    meta = {"id": "cmpl-3", "created": 5, "model": 'odd "name" \\ x'}
    for chat in (False, True):
        for ids in (None, [], [1, 22, 333]):
            t = ChunkTemplate.of(meta, chat, 1, ids is not None)
            for text in ("", 'quote " back \\ nl \n tab \t', "日本 🙂 \u2028", "\x00text\x00"):
                body = chunk_body(meta, chat, 1, text, None, None)
                if ids is not None:
                    body["choices"][0]["token_ids"] = ids
                assert t.render(text, ids) == event(body)


# ---- direct writes: the receiver writes a sleeping stream's plain tokens itself --------------------
def offer_past_the_queue(inbox, reply) -> bool:
    """A kept wrong twin of Inbox.offer: it writes whenever the reader sleeps, even with replies still queued."""
    from minisgl_edu.server.api import Inbox
    if inbox.direct is not None and inbox.waiter is not None and inbox.direct(reply):
        return True
    Inbox.put_nowait(inbox, reply)
    return False


def stream_as_written(offer=None) -> tuple[list[str], int]:
    """One stream through the real Inbox and direct_writer: what its client receives, in order, and how many replies
    were written directly. The request's task (simulated) writes what was queued whenever it runs; the receiver
    offers replies while the task sleeps, after a wake-up it has not run yet, and while a write would wait."""
    from minisgl_edu.server.api import ChunkTemplate, Inbox, direct_writer
    meta = {"id": "cmpl-1", "created": 1, "model": "m"}
    template = ChunkTemplate.of(meta, False, 0, False)
    wire: list[str] = []
    backed_up = [False]

    def send(message):
        async def go():
            if backed_up[0]:  # uvicorn waits for a backed-up socket before it writes
                await loop.create_future()
            wire.append(message["body"].decode())
        return go()

    loop = asyncio.new_event_loop()
    inbox = Inbox()
    inbox.direct = direct_writer(send, template)
    offer = offer or Inbox.offer
    plain = lambda i: UserReply(0, f"t{i}", False, None, 0, i)  # noqa: E731 -- a ReplyColumns row
    direct = 0

    def sleep():  # the task waits in Inbox.wait
        inbox.waiter = loop.create_future()

    def task_runs():  # it wakes, writes what is queued, in order (as sse() would)
        inbox.waiter = None
        while inbox.items:
            wire.append(template.render(inbox.get_nowait().incremental_output, None))

    sleep()
    for i in range(1, 3):
        direct += offer(inbox, plain(i))
    inbox.wake()  # Frontend.tick woke the task; it has not run yet
    direct += offer(inbox, UserReply(0, "w3", False, None, 0, 3, warning="w"))  # not plain: queued
    direct += offer(inbox, plain(4))  # the task has not written w3 yet: t4 must wait behind it
    task_runs()
    sleep()
    backed_up[0] = True
    direct += offer(inbox, plain(5))  # the write would wait: queued, nothing half-sent
    backed_up[0] = False
    direct += offer(inbox, plain(6))
    task_runs()
    sleep()
    direct += offer(inbox, UserReply(0, "", False, None, 0, 7))  # text held back: nothing to write either way
    direct += offer(inbox, plain(8))
    task_runs()
    loop.close()
    return [w.split('"text": ')[1].split(",")[0].strip('"') for w in wire], direct


def test_direct_writes_keep_each_streams_order():
    """Inbox.offer writes a plain reply at once only while the stream's task sleeps with nothing queued, and a write
    that would wait is not half-made: the client sees every text once, in order. The wrong twin that writes past
    queued replies is caught."""
    texts, direct = stream_as_written()
    assert texts == ["t1", "t2", "w3", "t4", "t5", "t6", "t8"]
    assert direct == 4  # t1, t2, the empty reply 7, t8
    wrong, _ = stream_as_written(offer_past_the_queue)
    assert wrong != texts and wrong.index("t4") < wrong.index("w3")


@pytest.mark.parametrize("serve_args", [[], ["--no-direct-write"], ["--no-reply-socket"]])
def test_direct_writes_on_a_real_api_deliver_every_token(serve_args):
    """The real API process (FastAPI, uvicorn) in front of api_cadence.py's stand-in workers: with direct writes on,
    most tokens are written by the receiver (/metrics counts them) and every stream still gets all its tokens, its
    finish and [DONE]; with --no-direct-write none is. The replies reach the API over either wire (chapter 1)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    import api_cadence
    args = type("A", (), dict(streams=6, tokens=40, interval_ms=5.0, arrivals=0.0, client_procs=1, spy=None))
    r = api_cadence.measure(args, serve_args)
    assert r["failed"] == 0 and r["tokens"] == 6 * 40
    assert (r["direct_writes"] == 0) if "--no-direct-write" in serve_args else r["direct_writes"] > 6 * 40 // 2


# ---- failures are counted: stub servers ----------------------------------------------------------
def stub_app():
    """A fake OpenAI server: prompt[0] % 4 picks 0: a good stream, 1: HTTP 500, 2: a stream that ends without
    [DONE], 3: a connection dropped mid-stream."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"data": [{"id": "stub"}]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        kind = body["prompt"][0] % 4
        if kind == 1:
            return JSONResponse({"error": {"message": "boom"}}, 500)

        async def events():
            for i in range(body["max_tokens"]):
                yield f"data: {json.dumps({'choices': [{'index': 0, 'text': 'x', 'finish_reason': None}]})}\n\n"
                await asyncio.sleep(0.001)
                if kind == 3 and i == 1:
                    raise RuntimeError("the stub drops the connection")
            if kind == 2:
                return
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    return app


@pytest.fixture(scope="module")
def stub_url():
    import uvicorn
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(stub_app(), host="127.0.0.1", port=port, log_level="critical"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the stub server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    t.join(10)


@pytest.mark.parametrize("client", ["raw", "httpx"])
def test_errors_and_cut_streams_count_as_failed(stub_url, client):
    reqs = [BenchRequest([k] + [1] * 5, 6, 4) for k in (0, 1, 2, 3, 0, 1, 2, 3, 0)]
    results, duration = asyncio.run(run_load(stub_url, reqs, progress=False, http_client=client))
    s = summarize(results, duration)
    assert (s["completed"], s["failed"]) == (3, 6), s["errors"]
    by_kind = {k: [r for q, r in zip(reqs, results) if q.prompt[0] == k] for k in range(4)}
    assert all(r.ok and r.output_tokens == 4 and len(r.itl) == 3 for r in by_kind[0])
    assert all(not r.ok and "HTTP 500" in r.error for r in by_kind[1])
    assert all(not r.ok and "[DONE]" in r.error for r in by_kind[2])
    assert all(not r.ok for r in by_kind[3])
    assert s["total_output_tokens"] == 12  # only the completed requests' tokens count


def test_poisson_arrivals_and_max_concurrency(stub_url):
    reqs = [BenchRequest([0, 1], 2, 3) for _ in range(12)]
    results, duration = asyncio.run(run_load(stub_url, reqs, request_rate=40.0, max_concurrency=2, progress=False))
    starts = sorted(r.start for r in results)
    assert all(r.ok for r in results) and starts[-1] > 0.05  # spread out, not all at once
    with pytest.raises(SystemExit):
        parse_args(["serve", "--prompt-mode", "neither"])
    assert math.isinf(parse_args(["serve"]).request_rate)


def test_client_shards_keep_order_failures_and_the_arrival_schedule(stub_url):
    """`--client-procs 3`: each request's result comes back in its own place (the kinds differ, so a shuffled
    shard would mismatch), failures still count, and every request leaves no earlier than its Poisson arrival."""
    reqs = [BenchRequest([k] + [1] * 5, 6, 4) for k in (0, 1, 2, 3, 0, 1, 2, 3, 0, 0)]
    results, duration, cpu = run_load_sharded(stub_url, reqs, 3, request_rate=50.0, seed=7, progress=False)
    assert (summarize(results, duration)["completed"], cpu > 0) == (4, True)
    assert cpu < 1.0, cpu  # ten small requests: the processes' start (importing torch, ~1 s each) is not the load's CPU
    for req, r in zip(reqs, results):
        kind = req.prompt[0]
        assert r.ok == (kind == 0), (kind, r.error)
        assert kind != 1 or "HTTP 500" in r.error
    for at, r in zip(arrival_times(len(reqs), 50.0, 7), results):
        assert r.start >= at - 1e-3  # never early: the shared start plus the request's own arrival
    assert max(r.start for r in results) > 0.05
    with pytest.raises(ValueError, match="client-procs"):
        run_load_sharded(stub_url, reqs, 3, max_concurrency=2, progress=False)
    with pytest.raises(SystemExit):
        parse_args(["serve", "--client-procs", "0"])


def load_shard_whole_life(conn, base_url, reqs, arrivals, kwargs):
    """The wrong client process, kept: it reports its CPU since it started (its imports included), not the load's."""
    from minisgl_edu.bench_serve import run_load

    def start_at():
        conn.send(("ready",))
        return conn.recv()
    results, _ = asyncio.run(run_load(base_url, reqs, progress=False, arrivals=arrivals, start_at=start_at,
                                      on_done=lambda: conn.send(("tick",)), **kwargs))
    conn.send(("done", results, time.perf_counter(), time.process_time()))
    conn.close()


@pytest.mark.parametrize("count", ["from the start", "whole life"])
def test_client_cpu_is_the_loads_not_the_imports(stub_url, monkeypatch, count):
    """`--client-procs`: each client process reports the CPU of the load, from the shared start on. A process
    that counts its whole life reports its imports (~1 s of CPU each) for ten small requests."""
    from minisgl_edu import bench_serve
    if count == "whole life":
        monkeypatch.setattr(bench_serve, "_load_shard", load_shard_whole_life)
    reqs = [BenchRequest([0] + [1] * 5, 6, 4) for _ in range(10)]
    results, duration, cpu = run_load_sharded(stub_url, reqs, 3, progress=False)
    assert summarize(results, duration)["completed"] == 10
    assert (0 < cpu < 1.0) == (count == "from the start"), cpu


def unshard_in_blocks(parts):
    """The wrong inverse, kept: the shares concatenated, as if each process had taken a contiguous block."""
    return [x for part in parts for x in part]


@pytest.mark.parametrize("inverse", [unshard, unshard_in_blocks])
def test_unshard_puts_every_result_back_in_its_place(inverse):
    """Splitting a load among n processes and joining their results gives back the request order, for any n (more
    processes than requests too); the block-wise join is caught."""
    ok = True
    for n_items in (0, 1, 5, 10, 13):
        items = list(range(n_items))
        for n in (1, 2, 3, 4, 7, 16):
            ok &= inverse([shard(items, i, n) for i in range(n)]) == items
    assert ok == (inverse is unshard)


def test_client_shards_report_a_server_they_cannot_reach():
    """A client process that fails before the start (nothing listens at the URL) is reported at once, not waited for."""
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="before the start"):
        run_load_sharded(f"http://127.0.0.1:{free_port()}", [BenchRequest([1, 2], 2, 2)] * 4, 2, progress=False)
    assert time.monotonic() - t0 < 60


def test_sse_parsing():
    assert parse_sse_line("data: [DONE]") == "[DONE]"
    assert parse_sse_line('data: {"a": 1}') == {"a": 1}
    assert parse_sse_line(": keep-alive") is None and parse_sse_line("") is None


# ---- the real CPU server -------------------------------------------------------------------------
def test_bench_against_the_cpu_server_completes_without_failures(tmp_path):
    """The CLI end to end: `compare` starts the server, runs offline LLM.generate and the load side by side."""
    out = tmp_path / "cmp.json"
    code = bench.main(["compare", "--num-prompts", "6", "--input-len", "8", "24", "--output-len", "4", "8",
                       "--warmup", "1", "--no-progress", "--out", str(out), "--device", "cpu",
                       "--serve-args=--max-running-reqs 16 --context-length 512 --max-total-tokens 4096",
                       "--server-log", str(tmp_path / "serve.log")])
    res = json.loads(out.read_text())
    assert code == 0
    run = res["runs"][0]
    serve, offline = run["serve"], run["offline"]
    assert serve["completed"] == 6 and serve["failed"] == 0, serve["errors"]
    expected = sum(r.output_len for r in random_requests(6, 0, (8, 24), (4, 8)))
    assert serve["total_output_tokens"] == offline["total_output_tokens"] == expected  # ignore_eos: exact lengths
    assert serve["ttft_ms"]["median"] > 0 and serve["itl_ms"]["median"] > 0
    assert res["ratio_serve"]["median"] > 0 and run["serve"]["step_ms"].get("decode", 0) > 0
    assert run["serve"]["step_median_ms"].get("decode", 0) > 0  # from the step histogram's buckets
    assert run["serve"]["step_p99_ms"] >= run["serve"]["step_median_ms"]["decode"]  # every phase's steps together
    # the same intervals timed where the API process receives them: near the client's (coarse buckets here)
    assert 0.5 < run["serve"]["api_itl_p99_ms"] / serve["itl_ms"]["p99"] < 2
    assert 0.5 < run["serve"]["emit_p99_ms"] / serve["itl_ms"]["p99"] < 2  # ... and where the scheduler hands them out
    cpu = serve["cpu"]  # each server process's CPU per token, and how often its main thread was pushed off its core
    assert {"scheduler-rank0", "detokenizer", "api"} <= cpu.keys()
    assert all(cpu[k]["us_per_token"] > 0 and cpu[k]["preempted_per_s"] >= 0 for k in ("scheduler-rank0", "api"))


def quantile_upper_bound(buckets, q=0.5):
    """The wrong median, kept: the upper bound of the bucket that holds it, with no interpolation."""
    total = buckets[-1][1]
    return next(le for le, cum in buckets if cum >= q * total)


@pytest.mark.parametrize("median", ["interpolated", "upper bound"])
def test_step_median_from_the_servers_own_buckets(median):
    """The ITL target compares against the median decode step: read from /metrics' step histogram (STEP_BUCKETS,
    0.1 ms apart where steps fall) by histogram_quantile's interpolation, within 0.01 ms of the samples' median;
    their mean, pulled up by a few slow steps, is not it."""
    import itertools
    import statistics

    from minisgl_edu.bench_serve import histogram_quantile
    from minisgl_edu.server.metrics import STEP_BUCKETS, Histogram
    rnd = random.Random(0)
    samples = [rnd.uniform(1.30e-3, 1.45e-3) for _ in range(1000)] + [2.5e-3] * 50  # decode steps, a few mixed
    h = Histogram(STEP_BUCKETS)
    for v in samples:
        h.observe(v)
    buckets = list(zip(STEP_BUCKETS + (math.inf,), itertools.accumulate(h.counts)))
    got = (histogram_quantile if median == "interpolated" else quantile_upper_bound)(buckets)
    true = statistics.median(samples)
    assert abs(statistics.mean(samples) - true) > 4e-5  # the mean is not the median here
    if median == "interpolated":
        assert abs(got - true) < 1e-5, (got, true)
        assert histogram_quantile([]) is None and histogram_quantile([(0.001, 0), (math.inf, 0)]) is None
        assert histogram_quantile([(0.001, 0), (math.inf, 3)]) is None  # in the +Inf bucket: no bound to interpolate to
    else:  # the mutant is off by most of a bucket
        assert abs(got - true) > 1e-5


def merge_buckets_by_max(phases):
    """The wrong merge, kept: each bound's largest cumulative count (one phase's steps hide the others')."""
    total = {}
    for b in phases:
        for le, cum in b:
            total[le] = max(total.get(le, 0), cum)
    return sorted(total.items())


@pytest.mark.parametrize("merge", ["sum", "max"])
def test_step_p99_over_every_phase(merge):
    """step_p99_ms: the 0.99 quantile of decode and mixed steps together, from their two histograms; the mixed
    steps are 3 % of the steps, so the p99 is a mixed step's time, not a decode step's."""
    import itertools

    from minisgl_edu.bench_serve import histogram_quantile, merge_buckets
    from minisgl_edu.server.metrics import STEP_BUCKETS, Histogram
    rnd = random.Random(1)
    decode = [rnd.uniform(1.30e-3, 1.45e-3) for _ in range(970)]
    mixed = [rnd.uniform(2.60e-3, 2.70e-3) for _ in range(30)]
    phases = []
    for samples in (decode, mixed):
        h = Histogram(STEP_BUCKETS)
        for v in samples:
            h.observe(v)
        phases.append(list(zip(STEP_BUCKETS + (math.inf,), itertools.accumulate(h.counts))))
    got = histogram_quantile((merge_buckets if merge == "sum" else merge_buckets_by_max)(phases), 0.99)
    true = sorted(decode + mixed)[989]
    if merge == "sum":
        assert abs(got - true) < 1e-4, (got, true)  # inside the 0.1 ms bucket that holds it
    else:  # the mutant sees only the decode steps
        assert got < 1.5e-3


def hop_ms_of_totals(before: dict, after: dict) -> dict:
    """A kept wrong twin of bench_serve_timed's hop_ms: quantiles of the server's totals, not of this run's steps."""
    from minisgl_edu.bench_serve import histogram_quantile
    return {h: {"median": 1e3 * histogram_quantile(b, 0.5), "p99": 1e3 * histogram_quantile(b, 0.99)}
            for h, (_, _, b) in after.items()}


@pytest.mark.parametrize("reader", ["bench", "totals"])
def test_hop_ms_reads_only_the_runs_own_steps(monkeypatch, reader):
    """bench_serve_timed's hop_ms: each hop's median and p99 over the steps of this run alone (the /metrics totals
    after minus before), where an earlier run left slow hops in the same histograms."""
    import itertools

    from minisgl_edu.bench_serve import HOP_METRIC, bench_serve_timed
    from minisgl_edu.server.metrics import HOP_BUCKETS, HOPS, Histogram
    earlier, run = [3e-3] * 400, [2.2e-4] * 300 + [6.8e-4] * 3  # 1 % of this run's steps are slow ones
    hists = {h: Histogram(HOP_BUCKETS) for h in HOPS}

    def totals():
        return {h: (x.sum, sum(x.counts), list(zip(HOP_BUCKETS + (math.inf,), itertools.accumulate(x.counts))))
                for h, x in hists.items()}
    for x in hists.values():
        for v in earlier:
            x.observe(v)
    before = totals()
    for x in hists.values():
        for v in run:
            x.observe(v)
    after = totals()
    calls = iter([before, after])
    monkeypatch.setattr(bench_serve, "histogram_totals", lambda url, names: {n: next(calls) if n == HOP_METRIC else {}
                                                                              for n in names})
    monkeypatch.setattr(bench_serve, "bench_serve", lambda a: {"config": {}})
    got = bench_serve_timed(None, "http://stub")["hop_ms"] if reader == "bench" else hop_ms_of_totals(before, after)
    ok = all(0.2 <= q["median"] <= 0.25 and 0.2 <= q["p99"] <= 0.7 for q in got.values())
    assert set(got) == set(HOPS) and ok == (reader == "bench"), got


# ---- arrival stamps: the client's clock is when bytes arrived, not when its loop got to them ----------------
def paced_server(times: list[float]) -> str:
    """One streamed completion whose events leave at `times` (seconds after the request came in), one per packet."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += c.recv(65536)
        t = time.perf_counter()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = lambda p: b"%x\r\n%s\r\n" % (len(p), p)  # noqa: E731
        for at in times:
            time.sleep(max(0.0, t + at - time.perf_counter()))
            c.sendall(chunk(b'data: {"choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'))
        c.sendall(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        c.close()
        srv.close()
    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}"


def busy_client_run(clock: str):
    """Events leave at 80, 200 and 320 ms; the client's event loop is busy from 30 to 150 ms (parsing other
    streams, say), so it reads the first event ~70 ms after it arrived and the others on time."""
    url = paced_server([0.08, 0.20, 0.32])

    async def go():
        async def busy():
            await asyncio.sleep(0.03)
            time.sleep(0.12)  # blocks the loop
        b = asyncio.create_task(busy())
        results, _ = await run_load(url, [BenchRequest([1], 1, 3)], model="stub", progress=False, arrival_clock=clock)
        await b
        return results[0]
    return asyncio.run(go())


def check_arrival_times(res) -> None:
    """The true times: first token 80 ms after the request, then 120 ms apart (CI slack: 25 ms)."""
    assert res.ok, res.error
    assert res.ttft == pytest.approx(0.08, abs=0.025), res.ttft
    assert res.itl == pytest.approx([0.12, 0.12], abs=0.025), res.itl


def arrival_wall_as_perf(anc, read_at):
    """Wrong: the kernel's stamp (wall-clock time) taken as a perf_counter reading."""
    import struct
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == bench_serve.SO_TIMESTAMPNS:
            sec, ns = struct.unpack("qq", data[:16])
            return sec + ns * 1e-9
    return None


@pytest.fixture
def stamps_on():
    """Linux stamps arriving packets only while some socket asks for stamps, and the first such socket turns that on
    through deferred kernel work: on a busy machine a read can come before it and carry no stamp (the client then
    honestly reports the read clock). One stamped socket held open for the test keeps the kernel stamping."""
    keep = socket.socket()
    keep.setsockopt(socket.SOL_SOCKET, bench_serve.SO_TIMESTAMPNS, 1)
    time.sleep(0.2)
    yield
    keep.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_events_are_timed_by_their_arrival_not_by_a_busy_loop(monkeypatch, stamps_on):
    res = busy_client_run("kernel")
    assert res.clock == "kernel"
    check_arrival_times(res)
    # the same run read by the loop's clock: the first token late by the busy spell, the first interval short
    assert res.ttft_read > 0.13 and res.itl_read[0] < 0.09, (res.ttft_read, res.itl_read)
    # the checker fails the twins: read time as the clock, and the kernel's stamp taken without its clock change
    with pytest.raises(AssertionError):
        check_arrival_times(busy_client_run("read"))
    monkeypatch.setattr(bench_serve, "arrival_of", arrival_wall_as_perf)
    with pytest.raises(AssertionError):
        check_arrival_times(busy_client_run("kernel"))


def test_events_sharing_a_read_are_counted():
    """Two events in one read carry one arrival stamp (TCP stamps a read by its last packet): counted, so a run
    can say how many intervals its clock could not time apart."""
    from minisgl_edu.bench_serve import RequestResult, SSEStats
    ev = b'data: {"choices":[{"index":0,"text":"x"}]}'
    res = RequestResult(False)
    sse = SSEStats(res, 0.0)
    sse.feed([ev], 1.0)
    sse.feed([ev, b"", ev], 2.0)
    sse.feed([ev], 3.0)
    assert res.shared_reads == 1 and res.itl == [1.0, 0.0, 1.0] and res.ttft == 1.0
    assert summarize([RequestResult(True, output_tokens=4, itl=res.itl, shared_reads=1)], 1.0)["shared_read_pct"] == 25.0


def tick_cpu_seconds(pid: int) -> float | None:
    """The old reader, kept as the case the test below catches: /proc's utime + stime in clock ticks (10 ms), which
    charge whoever runs when a tick fires, so the API at a light load read 0.0 us per token (a CI run failed on it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads another process's CPU clock (Linux)")
@pytest.mark.parametrize("reader", [bench_serve.cpu_seconds, pytest.param(tick_cpu_seconds, marks=pytest.mark.xfail(
    strict=True, reason="tick counts: multiples of 10 ms"))])
def test_cpu_seconds_resolves_less_than_a_tick(reader):
    """A child that spins ~3 ms on a thread, then sleeps: its CPU time is read to well under a tick, and a gone
    process reads None."""
    import subprocess
    code = ("import threading, time\n"
            "def spin():\n    t = time.perf_counter()\n    while time.perf_counter() - t < 0.003: pass\n"
            "th = threading.Thread(target=spin); th.start(); th.join()\nprint('ok', flush=True)\ntime.sleep(30)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ok"
        time.sleep(0.2)  # let it reach its sleep
        cpu = reader(p.pid)
        assert 0.003 < cpu < 5  # startup + the spin on its thread
        assert abs(cpu * 100 - round(cpu * 100)) > 1e-6  # not a whole number of 10 ms ticks
    finally:
        p.kill()
        p.wait()
    assert reader(p.pid) is None
