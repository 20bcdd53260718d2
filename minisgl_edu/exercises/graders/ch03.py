"""Chapter 3: the reserved size of one request, and admission (try_add) — against the library's own
decisions on random scenarios, then inside the engine (same schedule, same tokens)."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import Wrong
from ..oracle import STANDARD_CASES, Case, compare
from ..swap import swapped
from . import call, prop

TIGHT = Case(4, 64, 128, 8)  # 32 pages: the long prompt waits for pages (condition 3 and the reserved size)
ADMISSION_CASES = STANDARD_CASES + (TIGHT,)
REAL = Case(4, 16, 512, 4, max_tokens=3, model="default")  # the default model: chunks of 16, radix hits, 4 rows


def grade_pages_to_finish(ex, path, module) -> None:
    from ...req import Req, SamplingParams

    def check(x):
        ps, prompt, max_tokens, cached = x
        r = Req(0, [1] * prompt, SamplingParams(max_tokens=max_tokens))
        r.cached_len = min(cached, r.max_device_len - 1)
        owned = {p // ps for p in range(r.cached_len)}
        want = len({p // ps for p in range(r.cached_len, r.max_device_len)} - owned)
        got = call("pages_to_finish", module.pages_to_finish, r, ps)
        if got != want:
            raise Wrong(f"page_size {ps}, cached_len {r.cached_len}, max_device_len {r.max_device_len}: your "
                        f"pages_to_finish says {got}, but positions {r.cached_len}..{r.max_device_len - 1} need "
                        f"{want} new page(s) (the page holding position {r.cached_len - 1} is already owned)"
                        if r.cached_len % ps else
                        f"page_size {ps}, cached_len {r.cached_len}, max_device_len {r.max_device_len}: your "
                        f"pages_to_finish says {got}, but positions {r.cached_len}..{r.max_device_len - 1} need {want} page(s)")

    prop(st.tuples(st.sampled_from([1, 2, 4, 16]), st.integers(1, 40), st.integers(1, 20), st.integers(0, 60)), check, 80,
         explicit=((4, 5, 3, 6), (4, 5, 3, 4), (1, 5, 3, 2)))
    with swapped([ex], lambda e: path):
        for case in ADMISSION_CASES:
            compare(case, "pages_to_finish", check_schedule=True)


# ---- try_add: a scenario is built twice (identically), once for the library and once for you -----------------
scenarios = st.fixed_dictionaries({
    "ps": st.sampled_from([1, 4]),
    "num_pages": st.integers(4, 40),
    "rows": st.integers(1, 3),
    "rows_taken": st.integers(0, 2),
    "budget": st.integers(0, 64),
    "reserved": st.integers(0, 12),
    "prefix_pages": st.integers(0, 3),  # pages of a shared prefix already in the radix cache
    "locked": st.booleans(),  # ... locked by a running request
    "chunk": st.integers(0, 30),  # > 0: the first request is a chunked prefill continuing from this cached_len
    # (own tokens, 0: no shared prefix | 1: the cached prefix + more | 2: exactly the cached prefix, max_tokens)
    "reqs": st.lists(st.tuples(st.integers(1, 40), st.sampled_from([0, 1, 2]), st.integers(1, 12)), min_size=1, max_size=4),
})


def _build(s, try_add):
    import torch

    from ...paging import PagePool
    from ...prefill import PrefillAdder
    from ...radix import RadixCache
    from ...req import Req, SamplingParams
    ps = s["ps"]
    pool = PagePool(s["num_pages"], ps, s["rows"], 128, "cpu")
    cache = RadixCache(ps)
    pool.evict_fn = cache.evict
    for _ in range(min(s["rows_taken"], s["rows"])):
        pool.take_row()
    base = [(7 * i) % 90 + 3 for i in range(64)]
    n_prefix = min(s["prefix_pages"], pool.num_free_pages) * ps
    if n_prefix:
        pages = pool.take_pages(n_prefix // ps)
        locs = (pages[:, None] * ps + torch.arange(ps, dtype=torch.int32)).flatten()
        cache.insert_prefix(base[:n_prefix], locs)
        if s["locked"]:
            cache.lock(cache.match_prefix(base[:n_prefix])[0])
    reqs = []
    for i, (own, shares, max_tokens) in enumerate(s["reqs"]):
        own_ids = [(11 * i + 5 * k) % 90 + 3 for k in range(own)]
        ids = own_ids if shares == 0 or not n_prefix else base[:n_prefix] + ([] if shares == 2 else own_ids)
        reqs.append(Req(i, ids, SamplingParams(max_tokens=max_tokens)))
    if s["chunk"] and pool.free_rows and reqs[0].prompt_len > s["chunk"] and \
            -(-s["chunk"] // ps) <= pool.num_free_pages:
        r = reqs[0]  # admitted earlier: owns a row and the pages of its first chunk
        r.table_idx, r.device_len = pool.take_row(), s["chunk"]
        pool.token_pool[r.table_idx, : r.prompt_len] = torch.tensor(r.token_ids, dtype=torch.int32)
        pool.assign_locations([r])
        r.cached_len = r.device_len
    adder = PrefillAdder(s["budget"], s["reserved"], pool, cache)
    return adder, reqs, lambda req: try_add(adder, req)


def _state(adder, req):
    row = req.table_idx
    table = adder.pool.page_table[row, : req.matched_len].tolist() if row >= 0 else []
    tokens = adder.pool.token_pool[row, : req.prompt_len].tolist() if row >= 0 else []
    return dict(cached_len=req.cached_len, device_len=req.device_len, has_row=row >= 0, matched_len=req.matched_len,
                token_budget=adder.token_budget, reserved_pages=adder.reserved_pages,
                evictable=adder.cache.evictable_size, protected=adder.cache.protected_size,
                prefix_in_table=table, prompt_in_token_pool=tokens, free_rows=len(adder.pool.free_rows))


def _describe(s, reqs, i) -> str:
    r = reqs[i]
    where = "continuing a chunk" if r.table_idx >= 0 else "fresh"
    return (f"page_size {s['ps']}, {s['num_pages']} pages, {s['rows'] - min(s['rows_taken'], s['rows'])} free row(s), "
            f"token budget {s['budget']}, reserved {s['reserved']} pages, a cached prefix of "
            f"{s['prefix_pages'] * s['ps']} tokens{' (locked)' if s['locked'] else ''}; request {i} ({where}, "
            f"prompt {r.prompt_len}, max_tokens {r.sampling.max_tokens})")


def grade_try_add(ex, path, module) -> None:
    from ...prefill import PrefillAdder
    library = PrefillAdder.__dict__["try_add"]

    def check(s):
        ref_adder, ref_reqs, ref_add = _build(s, library)
        adder, reqs, add = _build(s, module.try_add)
        for i in range(len(reqs)):
            desc = _describe(s, ref_reqs, i)
            ok_ref = ref_add(ref_reqs[i])
            why = ref_adder.log[-1] if not ok_ref else "admits it"
            ok = call("try_add", add, reqs[i], on=f"{desc} (the library {'refuses it: ' if not ok_ref else ''}{why})")
            if not ok and not ok_ref and adder.log[-1:] and adder.log[-1].split(":")[0] != why.split(":")[0]:
                raise Wrong(f"{desc}: your try_add refused it for condition {adder.log[-1].split(':')[0]}; the library "
                            f"for condition {why}")
            if bool(ok) != ok_ref:
                raise Wrong(f"{desc}: your try_add returned {bool(ok)}; the library "
                            f"{'admits it' if ok_ref else 'refuses it (' + why + ')'}")
            mine, ref = _state(adder, reqs[i]), _state(ref_adder, ref_reqs[i])
            for k in ref:
                if mine[k] != ref[k]:
                    raise Wrong(f"{desc}: after your try_add {k} is {mine[k]}, the library's is {ref[k]}")
            if not ok_ref:
                break

    base = dict(ps=1, num_pages=8, rows=2, rows_taken=0, budget=16, reserved=0, prefix_pages=0, locked=False, chunk=0)
    explicit = (
        {**base, "rows_taken": 2, "reqs": [(3, 0, 2)]},  # condition 1
        {**base, "budget": 2, "reqs": [(5, 0, 2)]},  # chunked: the budget is smaller than the prompt
        {**base, "reserved": 6, "reqs": [(2, 0, 2)]},  # condition 3: the reserved size leaves too little
        {**base, "ps": 4, "num_pages": 12, "prefix_pages": 2, "reqs": [(3, 2, 2)]},  # a fully cached prompt
        {**base, "num_pages": 12, "prefix_pages": 3, "reqs": [(3, 1, 2)]},  # a cache hit: locked on admission
        {**base, "chunk": 3, "budget": 4, "reqs": [(9, 0, 2)]},  # a chunk continuing
    )
    prop(scenarios, check, 120, explicit)
    with swapped([ex], lambda e: path):
        for case in ADMISSION_CASES + (REAL,):
            compare(case, "try_add", check_schedule=True)
