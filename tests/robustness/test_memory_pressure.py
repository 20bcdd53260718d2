"""Robustness — memory pressure without failure: does a tiny KV pool only slow the work down?

A pool of a few hundred tokens and a prefill budget of 32 serve 200 requests with shared prefixes
and long outputs. Requests must wait rather than fail, the radix cache must evict (and never a
locked node), the tokens must equal those of a run with a large pool, and afterwards every page
is accounted for. A request that no schedule could ever fit is refused at once with a ValueError.
"""
from __future__ import annotations

import random
import time

import pytest
import torch

from minisgl_edu import SamplingParams
from tiny_model import VOCAB, one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (one_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL_POOL = 256  # tokens: about three of the requests below at once
N_REQS = 200


def workload(n: int, seed: int = 0) -> tuple[list[list[int]], list[SamplingParams]]:
    """n prompts drawn from 8 shared 24-token prefixes + 1..12 own tokens; 24..48 output tokens each."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(VOCAB) for _ in range(24)] for _ in range(8)]
    prompts = [rng.choice(prefixes) + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 12))] for _ in range(n)]
    params = [SamplingParams(max_tokens=rng.randint(24, 48), ignore_eos=True) for _ in range(n)]
    return prompts, params


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return tiny_model_dir(str(tmp_path_factory.mktemp("pressure")), max_positions=512)


class EvictionAudit:
    """Wraps the cache's evict (as the pool calls it) and checks each call against the tree and the page table."""

    def __init__(self, sched):
        self.sched, self.cache, self.evict = sched, sched.cache, sched.cache.evict
        self.calls = self.tokens = 0
        sched.pool.evict_fn = self

    def __call__(self, num_tokens: int) -> torch.Tensor:
        before = set(self.cache._nodes())
        locked = {n for n in before if n.ref_count > 0}
        table = self.sched.pool.page_table
        in_use = [table[r.table_idx, : r.cached_len] for r in self.sched.live.values() if r.table_idx >= 0]
        freed = self.evict(num_tokens)
        after = set(self.cache._nodes())
        removed = before - after
        assert locked <= after, "a locked node was evicted"
        assert all(n.ref_count == 0 for n in removed), "an evicted node had ref_count > 0"
        assert len(freed) == sum(len(n.key) for n in removed)
        if in_use:  # no slot a live request still reads may be handed out again
            assert not torch.isin(freed, torch.cat(in_use)).any(), "eviction freed a slot a live request uses"
        self.calls += 1
        self.tokens += len(freed)
        return freed


def run(llm, prompts, params) -> tuple[list[list[int]], dict]:
    """Generate, recording the queue's shape after every step."""
    sched, seen = llm.scheduler, {"max_running": 0, "max_pending": 0, "steps": 0}
    step = sched.step

    def watched_step():
        out = step()
        seen["steps"] += 1
        seen["max_running"] = max(seen["max_running"], len(sched.running))
        seen["max_pending"] = max(seen["max_pending"], len(sched.pending))
        return out

    sched.step = watched_step
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert all(o["finish_reason"] == "length" for o in outs), "a request ended other than by its length"
    assert [len(o["token_ids"]) for o in outs] == [p.max_tokens for p in params]
    return [o["token_ids"] for o in outs], seen


@pytest.mark.parametrize("page_size,n", [(1, N_REQS), (4, N_REQS),
                                         pytest.param(1, 10 * N_REQS, marks=pytest.mark.slow, id="soak-1-2000")])
def test_small_pool_waits_evicts_and_matches_large_pool(model_dir, page_size, n):
    prompts, params = workload(n)
    big = tiny_llm(model_dir, page_size=page_size, max_prefill_tokens=32)
    expected, big_seen = run(big, prompts, params)
    small = tiny_llm(model_dir, page_size=page_size, max_prefill_tokens=32, max_total_tokens=SMALL_POOL)
    sched, pool = small.scheduler, small.engine.pool
    assert pool.num_pages * page_size == SMALL_POOL
    audit = EvictionAudit(sched)
    t0 = time.perf_counter()
    got, seen = run(small, prompts, params)
    elapsed = time.perf_counter() - t0

    assert got == expected, "a small pool changed the tokens"
    # requests waited: far fewer ran at once than with a large pool, and the queue was long
    assert seen["max_running"] < big_seen["max_running"] and seen["max_running"] <= SMALL_POOL // 24
    assert seen["max_pending"] >= n - SMALL_POOL // 24
    # the cache filled the pool and had to give pages back
    assert audit.calls > 0 and audit.tokens >= page_size
    # afterwards: nothing live, nothing locked, and every page free or cached
    assert sched.idle and not sched.live
    sched.check_integrity()
    cached_pages = len(sched.cache.all_locations()) // page_size
    assert sched.cache.protected_size == 0
    assert pool.num_free_pages == pool.num_pages - cached_pages
    assert len(pool.free_rows) == pool.dummy_row
    print(f"\npage_size={page_size}: {n} reqs in {elapsed:.1f}s, {seen['steps']} steps, "
          f"max running {seen['max_running']} (large pool {big_seen['max_running']}), "
          f"{audit.calls} evictions, {audit.tokens} tokens evicted")


def test_request_that_can_never_fit_is_refused_at_once(model_dir):
    llm = tiny_llm(model_dir, max_prefill_tokens=32, max_total_tokens=SMALL_POOL)
    sched = llm.scheduler
    ok = [1, 2, 3, 4]
    too_big = [i % 90 + 1 for i in range(100)]  # 100 prompt tokens + 300 output > 256 slots, but < the 512 context
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"pool has only {SMALL_POOL}"):
        llm.generate([ok, too_big], [SamplingParams(max_tokens=8), SamplingParams(max_tokens=300)], use_tqdm=False)
    assert time.perf_counter() - t0 < 1.0, "the refusal waited for something"
    assert sched.idle and not sched.live, "a refused batch left a request queued"
    # the scheduler alone refuses it too, and stays usable
    with pytest.raises(ValueError, match=f"pool has only {SMALL_POOL}"):
        sched.add_request(10_000, too_big, SamplingParams(max_tokens=300))
    out = llm.generate([ok], SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)
    assert len(out[0]["token_ids"]) == 8
    sched.check_integrity()


def test_request_exactly_the_pool_size_runs_alone(model_dir):
    """The boundary: prompt + max_tokens == every slot of the pool fits (and must run by itself)."""
    llm = tiny_llm(model_dir, max_prefill_tokens=32, max_total_tokens=SMALL_POOL)
    prompts = [list(range(1, 57)), list(range(2, 58))]  # ids < VOCAB
    outs = llm.generate(prompts, SamplingParams(max_tokens=SMALL_POOL - 56, ignore_eos=True), use_tqdm=False)
    assert [len(o["token_ids"]) for o in outs] == [SMALL_POOL - 56] * 2
    ref = tiny_llm(llm.model_path, max_prefill_tokens=32)
    assert [o["token_ids"] for o in outs] == \
        [o["token_ids"] for o in ref.generate(prompts, SamplingParams(max_tokens=SMALL_POOL - 56, ignore_eos=True),
                                              use_tqdm=False)]
    assert max(s.batch_size for s in llm.scheduler.stats if s.phase == "decode") == 1
    llm.scheduler.check_integrity()
