"""Chapter 5: the radix tree's walk, split and evict — random operation sequences on your tree and the
library's side by side (same answers, integrity after every step), then the engine."""
from __future__ import annotations

from hypothesis import strategies as st

from .. import Wrong
from ..oracle import STANDARD_CASES, Case, compare
from ..swap import swapped
from . import call, prop

RADIX_CASES = STANDARD_CASES + (Case(4, 64, 128, 8),)
REAL = Case(4, 16, 512, 4, max_tokens=3, model="default")  # walk: radix hits on the default model too  # the last: a tight pool, so round 2 evicts round 1's prefixes

_tok = st.integers(1, 3)  # a tiny alphabet: keys share prefixes and diverge often
# insert / match / lock a key built from an earlier key's prefix (index, cut) + extra tokens: hits and splits
_key = st.tuples(st.integers(0, 5), st.integers(0, 12), st.lists(_tok, max_size=6))
ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(["insert", "match", "lock"]), _key),
    st.tuples(st.just("unlock"), st.integers(0, 3)),
    st.tuples(st.just("evict"), st.integers(1, 8))), min_size=1, max_size=14)


def _make_key(keys: list, spec) -> list:
    i, cut, extra = spec
    return (keys[i % len(keys)][:cut] if keys else []) + list(extra)


def _show(op) -> str:
    return f"{op[0]}({op[1]})"


def _differential(method: str, fn, examples: int = 100) -> None:
    import torch

    from ...radix import RadixCache
    Mine = type("YourRadixCache", (RadixCache,), {method: fn})

    def check(x):
        ps, seq = x
        ref, mine = RadixCache(ps), Mine(ps)
        ref_locked, my_locked, slot, keys, shown = [], [], 0, [], []
        for k, op in enumerate(seq):
            kind, arg = op
            if kind in ("insert", "match", "lock"):
                arg = _make_key(keys, arg)
                if not arg:
                    continue
            shown.append(_show((kind, arg)))
            where = f"page_size {ps}, after {', '.join(shown)}"
            if kind == "insert":
                key = arg[: len(arg) // ps * ps]
                if not key:
                    continue
                locs = torch.arange(slot, slot + len(key), dtype=torch.int32)
                slot += len(key)
                keys.append(key)
                a, b = ref.insert_prefix(key, locs), call(method, mine.insert_prefix, key, locs, on=where)
                if a != b:
                    raise Wrong(f"{where}: insert_prefix reported {b} tokens already cached; the library {a}")
            elif kind in ("match", "lock"):
                (na, la), (nb, lb) = ref.match_prefix(arg), call(method, mine.match_prefix, arg, on=where)
                if la.tolist() != lb.tolist():
                    hint = " (not a whole number of pages)" if len(lb) % ps else ""
                    raise Wrong(f"{where}: match_prefix returned slots {lb.tolist()}{hint}; the library {la.tolist()}")
                if kind == "lock":
                    ref.lock(na), mine.lock(nb)
                    ref_locked.append(na), my_locked.append(nb)
            elif kind == "unlock":
                if arg < len(ref_locked):
                    ref.unlock(ref_locked.pop(arg)), mine.unlock(my_locked.pop(arg))
            else:
                protected = {int(s) for n in mine._nodes() if n.ref_count for s in n.value}
                a, b = ref.evict(arg), call(method, mine.evict, arg, on=where)
                b = [int(s) for s in b]
                if set(b) & protected:
                    raise Wrong(f"{where}: evict freed slots {sorted(set(b) & protected)} of a locked node (ref_count > 0)")
                if sorted(a.tolist()) != sorted(b):
                    raise Wrong(f"{where}: evict freed slots {sorted(b)}; the library frees {sorted(a.tolist())} "
                                f"(least recently used unlocked leaves first, until {arg} tokens are freed)")
            _same_books(where, ref, mine)

    K = lambda *t: (0, 0, list(t))  # a literal key
    explicit = (
        (1, [("insert", K(1, 1)), ("insert", K(2, 2)), ("insert", K(3, 3)), ("match", K(1, 1)), ("evict", 2)]),  # LRU
        (1, [("insert", K(1, 1, 2, 2)), ("lock", K(1, 1, 2, 2)), ("insert", K(3, 3)), ("evict", 4)]),  # locked leaf
        (1, [("insert", K(1, 2, 3, 4)), ("match", K(1, 2, 9)), ("insert", K(1, 2, 7)), ("match", K(1, 2, 3, 4))]),
        (2, [("insert", K(1, 1, 2, 2)), ("match", K(1, 1, 2, 3)), ("insert", K(1, 1, 2, 3)), ("evict", 4)]),  # pages
    )
    prop(st.tuples(st.sampled_from([1, 2]), ops), check, examples, explicit)


def _same_books(where: str, ref, mine) -> None:
    """Your tree passes its integrity check and keeps the library's (evictable_size, protected_size)."""
    try:
        mine.check_integrity()
    except AssertionError as e:
        why = e or "a key and its slots differ in length, or a node is filed under the wrong key or parent"
        raise Wrong(f"{where}: your tree fails its integrity check ({why})") from None
    if (mine.evictable_size, mine.protected_size) != (ref.evictable_size, ref.protected_size):
        raise Wrong(f"{where}: (evictable_size, protected_size) is {(mine.evictable_size, mine.protected_size)}; "
                    f"the library's is {(ref.evictable_size, ref.protected_size)}")


def _grade(ex, path, module, method: str, fn) -> None:
    _differential(method, fn)
    with swapped([ex], lambda e: path):
        for case in RADIX_CASES + ((REAL,) if method == "_walk" else ()):
            compare(case, method.strip("_"), check_schedule=True)


def grade_walk(ex, path, module) -> None:
    _grade(ex, path, module, "_walk", module.walk)


def grade_split(ex, path, module) -> None:
    _grade(ex, path, module, "_split", module.split)


def grade_evict(ex, path, module) -> None:
    _grade(ex, path, module, "evict", module.evict)
