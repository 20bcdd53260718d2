"""Robustness — load: 64 concurrent streaming clients, a quarter of them walking away mid-stream.

Every surviving stream must be complete and equal to the same greedy request answered without
streaming; every abandoned request must be aborted (its pages freed, the integrity check passing);
and a second identical round must not grow the server's memory.

The server runs a tiny random-weight Llama with the default model's tokenizer and chat template (as in
test_hostile.py and test_faults.py): the HTTP, tokenizer, detokenizer and scheduler code are the real
ones, and random tokens stress the incremental detokenizer harder than the model's prose, while 3 x 64
requests cost seconds of CI instead of minutes.
"""
from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from serverproc import SMALL

CLIENTS = 64
LEAVERS = CLIENTS // 4
MAX_TOKENS = 16
LEAVER_MAX_TOKENS = 1000  # clamped to the context: ~1000 decode steps, minutes on a CPU, unless aborted


@pytest.fixture(scope="module")
def server(make_server, tiny_dir):
    return make_server("--model", tiny_dir, "--dummy-weights", *SMALL)


def body(i: int, stream: bool, max_tokens: int = MAX_TOKENS) -> dict:
    return {"messages": [{"role": "user", "content": f"Write one short sentence about the number {i}."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream, "ignore_eos": max_tokens != MAX_TOKENS}


async def stream_one(client: httpx.AsyncClient, i: int, leave_after: int | None) -> dict:
    """Stream request i; with leave_after, close the connection after that many chunks."""
    text, finish, chunks, done = [], None, 0, False
    payload = body(i, True, LEAVER_MAX_TOKENS if leave_after is not None else MAX_TOKENS)
    async with client.stream("POST", "/v1/chat/completions", json=payload) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            assert "error" not in chunk, chunk
            choice = chunk["choices"][0]
            text.append(choice["delta"].get("content") or "")
            finish = choice["finish_reason"] or finish
            chunks += 1
            if leave_after is not None and chunks >= leave_after:
                break  # leaving the `async with` closes the connection mid-stream
    return {"i": i, "text": "".join(text), "finish": finish, "done": done, "left": leave_after is not None}


async def one_round(url: str, leavers: dict[int, int]) -> list[dict]:
    limits = httpx.Limits(max_connections=CLIENTS + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        return await asyncio.wait_for(
            asyncio.gather(*(stream_one(client, i, leavers.get(i)) for i in range(CLIENTS))), timeout=600)


async def references(url: str) -> dict[int, str]:
    async with httpx.AsyncClient(base_url=url, timeout=600,
                                 limits=httpx.Limits(max_connections=CLIENTS + 8)) as client:
        rs = await asyncio.gather(*(client.post("/v1/chat/completions", json=body(i, False)) for i in range(CLIENTS)))
    out = {}
    for i, r in enumerate(rs):
        assert r.status_code == 200, r.text
        out[i] = r.json()["choices"][0]["message"]["content"]
    return out


def metrics(server) -> dict:
    """/metrics through prometheus_client's parser: {name or name{label=value}: value}."""
    from prometheus_client.parser import text_string_to_metric_families
    r = httpx.get(server.url + "/metrics", timeout=30)
    assert r.status_code == 200
    return {s.name + "".join(f"{{{k}={v}}}" for k, v in s.labels.items()): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def rss_split(server) -> tuple[int, int]:
    """(RSS of the scheduler ranks, RSS of every other process of the server), in bytes."""
    ranks = {p.pid for name, p in server.workers().items() if name.startswith("scheduler")}
    sched = sum(p.memory_info().rss for p in server.procs() if p.pid in ranks)
    return sched, server.rss() - sched


@pytest.mark.parametrize("rounds,extra", [(2, ()), pytest.param(2, ("--overlap",), id="overlap-early-receive"),
                                          pytest.param(6, ("--max-total-tokens", "4096"), marks=pytest.mark.slow,
                                                       id="soak-6-rounds")])
def test_64_streams_with_disconnects_complete_correctly_and_free_everything(request, make_server, rounds, extra):
    """`--overlap` runs the overlap loop on the CPU too, so the rank reads its mail while a step's tokens
    travel (`receive_early`) and the aborts wait for the loop's top. The soak variant uses a 4096-token pool:
    the KV pool is allocated untouched (no RSS) and its FIFO free list reaches fresh slots for a while, so only
    once every slot has been written once (a few rounds) can the scheduler's RSS be expected to stay flat."""
    server = request.getfixturevalue("server") if not extra else \
        make_server("--model", request.getfixturevalue("tiny_dir"), "--dummy-weights", *SMALL, *extra)
    rng = random.Random(0)
    leavers = {i: rng.randint(1, 8) for i in rng.sample(range(CLIENTS), LEAVERS)}  # who leaves, after how many chunks
    expected = asyncio.run(references(server.url))
    first = server.wait_idle()
    rss, split = [], []
    for rnd in range(rounds):
        m0 = metrics(server)
        results = asyncio.run(one_round(server.url, leavers))
        for res in results:
            if res["left"]:
                continue
            assert res["done"] and res["finish"] in ("stop", "length"), res
            assert res["text"] == expected[res["i"]], f"stream {res['i']} differs from the non-streamed answer"
        # the leavers asked for ~1000 tokens each; the abort count below proves they were aborted, not finished
        stats = server.wait_idle(timeout=30)
        assert stats["integrity"] == "ok", stats
        assert stats["free_pages"] + stats["cached_pages"] == stats["num_pages"], stats
        m1 = metrics(server)  # /metrics saw the same round: every leaver aborted, every other stream finished
        done = lambda m, r: m.get(f"minisgl:request_success_total{{finished_reason={r}}}", 0)  # noqa: E731
        assert done(m1, "abort") - done(m0, "abort") == LEAVERS
        assert sum(done(m1, r) - done(m0, r) for r in ("stop", "length")) == CLIENTS - LEAVERS
        assert m1["minisgl:num_requests_running"] == 0 == m1["minisgl:num_requests_waiting"]
        assert m1["minisgl:kv_cache_usage_perc"] == 0, m1
        assert server.healthy()
        rss.append(server.rss())
        split.append(rss_split(server))
    print(f"\nRSS after each round (MB): {[round(r / 2**20) for r in rss]}; "
          f"pages free/cached/total: {stats['free_pages']}/{stats['cached_pages']}/{stats['num_pages']} "
          f"(before the rounds: {first['free_pages']}/{first['cached_pages']})")
    assert rss[1] <= rss[0] * 1.05, f"RSS grew from {rss[0]} to {rss[1]} bytes between identical rounds"
    print(f"scheduler / other processes RSS per round (MB): {[(s >> 20, o >> 20) for s, o in split]}")
    assert split[-1][1] <= split[0][1] * 1.05, f"the API/tokenizer processes grew: {split}"
    if rounds > 3:  # the pool has been cycled: nothing may grow any more
        assert rss[-1] <= rss[2] * 1.05, f"RSS kept growing over {rounds} rounds: {rss}"
