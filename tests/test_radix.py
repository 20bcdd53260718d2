"""Chapter 5 — Radix cache and eviction: match / insert / split / lock / unlock / evict, and a
property test of the tree against a brute-force prefix model."""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl_edu.radix import NaiveCache, RadixCache, make_cache


def locs(start: int, n: int) -> torch.Tensor:
    return torch.arange(start, start + n, dtype=torch.int32)


def test_match_insert_split():
    c = RadixCache()
    assert c.insert_prefix([1, 2, 3, 4], locs(100, 4)) == 0
    node, got = c.match_prefix([1, 2, 3, 4, 5])
    assert got.tolist() == [100, 101, 102, 103] and node.key.tolist() == [1, 2, 3, 4]
    # a diverging insert splits [1,2,3,4] into [1,2] -> {[3,4], [9,9]}; values follow their keys
    assert c.insert_prefix([1, 2, 9, 9], locs(200, 4)) == 2
    assert len(c.root.children) == 1
    upper = c.root.children[1]
    assert upper.key.tolist() == [1, 2] and upper.value.tolist() == [100, 101]
    assert sorted(ch.key.tolist() for ch in upper.children.values()) == [[3, 4], [9, 9]]
    assert c.match_prefix([1, 2, 9, 9])[1].tolist() == [100, 101, 202, 203]
    assert c.match_prefix([1, 2, 3])[1].tolist() == [100, 101, 102]  # a match may split, too
    assert c.match_prefix([7])[1].tolist() == []
    assert c.size == c.evictable_size == 6 and c.protected_size == 0
    c.check_integrity()


def test_page_size_matches_whole_pages_only():
    c = RadixCache(page_size=4)
    c.insert_prefix(list(range(8)), locs(0, 8))
    assert len(c.match_prefix(list(range(7)))[1]) == 4  # the second page is incomplete
    assert len(c.match_prefix([0, 1, 2, 3, 4, 5, 99, 7])[1]) == 4  # diverges inside page 2
    assert c.insert_prefix([0, 1, 2, 3, 4, 5, 99, 7], locs(50, 8)) == 4
    c.check_integrity()
    with pytest.raises(AssertionError):
        c.insert_prefix([1, 2, 3], locs(0, 3))  # not page-aligned


def test_lock_protects_and_unlock_releases():
    c = RadixCache()
    c.insert_prefix([1, 2, 3], locs(0, 3))
    c.insert_prefix([1, 2, 4, 5], locs(10, 4))
    node, _ = c.match_prefix([1, 2, 4, 5])
    c.lock(node)
    assert (c.protected_size, c.evictable_size) == (4, 1)  # [1,2] and [4,5] protected; [3] not
    c.check_integrity()
    freed = c.evict(100)
    assert freed.tolist() == [2]  # only the unlocked leaf [3] could go
    c.lock(node)  # a second reader
    c.unlock(node)
    assert c.protected_size == 4
    c.unlock(node)
    assert (c.protected_size, c.evictable_size) == (0, 4)
    with pytest.raises(AssertionError, match="unlock without lock"):
        c.unlock(node)


def test_evict_is_lru_over_leaves():
    c = RadixCache()
    c.insert_prefix([1, 1], locs(0, 2))
    c.insert_prefix([2, 2], locs(10, 2))
    c.insert_prefix([3, 3], locs(20, 2))
    c.match_prefix([1, 1])  # touch: [1,1] becomes the most recent
    assert c.evict(1).tolist() == [10, 11]  # least recently used: [2,2]; whole leaves go
    assert c.evict(3).tolist() == [20, 21, 0, 1]
    assert c.size == 0 and c.evict(5).tolist() == []


def test_evict_cascades_to_parent_that_becomes_leaf():
    c = RadixCache()
    c.insert_prefix([1, 2, 3], locs(0, 3))
    c.insert_prefix([1, 2, 4], locs(10, 3))  # split: [1,2] -> [3], [4]
    freed = c.evict(3)
    assert sorted(freed.tolist()) == [0, 1, 2, 12]  # both leaves, then their parent
    assert c.size == 0 and not c.root.children
    c.check_integrity()


def test_naive_cache_shares_nothing():
    c = make_cache("naive", 4, "cpu")
    assert isinstance(c, NaiveCache)
    node, got = c.match_prefix([1, 2, 3, 4])
    assert len(got) == 0
    assert c.insert_prefix([1, 2, 3, 4], locs(0, 4)) == 4  # "all present": the caller frees it all
    assert c.size == 0 and len(c.evict(10)) == 0
    with pytest.raises(ValueError):
        make_cache("lru", 1, "cpu")


# ---- property test against a brute-force prefix model ------------------------------------------
seq = st.lists(st.integers(0, 2), max_size=12)
op = st.one_of(st.tuples(st.just("insert"), seq), st.tuples(st.just("match"), seq),
               st.tuples(st.just("lock"), seq), st.tuples(st.just("unlock"), st.integers(0, 5)),
               st.tuples(st.just("evict"), st.integers(1, 12)))


@settings(max_examples=500, deadline=None)
@given(ps=st.sampled_from([1, 2, 3]), ops=st.lists(op, min_size=1, max_size=30))
def test_radix_matches_brute_force(ps, ops):
    cache = RadixCache(page_size=ps)
    stored: dict[tuple, list[int]] = {}  # every stored page-aligned prefix -> locations of its last page
    locked: list[tuple] = []  # (node, prefix) per lock held
    counter = itertools.count()

    def longest(tokens) -> int:
        n = 0
        while n + ps <= len(tokens) and tuple(tokens[: n + ps]) in stored:
            n += ps
        return n

    def expected_locs(tokens, n) -> list[int]:
        return [x for k in range(ps, n + 1, ps) for x in stored[tuple(tokens[:k])]]

    def protected_pages() -> set:
        return {p[:k] for _, p in locked for k in range(ps, len(p) + 1, ps)}

    for kind, arg in ops:
        if kind == "insert":
            tokens = arg[: len(arg) // ps * ps]
            new = [next(counter) for _ in tokens]
            depth = cache.insert_prefix(tokens, torch.tensor(new, dtype=torch.int32))
            assert depth == longest(tokens)
            for k in range(depth + ps, len(tokens) + 1, ps):
                stored[tuple(tokens[:k])] = new[k - ps: k]
        elif kind in ("match", "lock"):
            node, got = cache.match_prefix(arg)
            n = longest(arg)
            assert len(got) == n and got.tolist() == expected_locs(arg, n)  # values aligned to keys
            if kind == "lock":
                cache.lock(node)
                locked.append((node, tuple(arg[:n])))
        elif kind == "unlock" and locked:
            node, _ = locked.pop(arg % len(locked))
            cache.unlock(node)
        elif kind == "evict":
            before = cache.evictable_size
            freed = set(cache.evict(arg).tolist())
            gone = [k for k, v in stored.items() if set(v) <= freed]
            assert sum(len(stored[k]) for k in gone) == len(freed), "freed slots that were never stored"
            assert not set(gone) & protected_pages(), "a locked node was evicted"
            assert len(freed) >= min(arg, before)
            assert cache.evictable_size == before - len(freed)
            for k in gone:
                del stored[k]
            assert all(k[:-ps] in stored for k in stored if len(k) > ps), "eviction left an orphan"
        cache.check_integrity()
        assert cache.size == len(stored) * ps
        assert cache.protected_size == len(protected_pages()) * ps
        assert sorted(cache.all_locations().tolist()) == sorted(x for v in stored.values() for x in v)
