"""Chapter 6 — the scheduler loop: overlap == normal, aborts free everything, a small KV pool makes
requests wait (not fail), what can never fit is refused at once, and mail read while a step's tokens travel
admits new requests without moving an abort out of its place."""
from __future__ import annotations

import random
from contextlib import nullcontext

import pytest

from minisgl_edu import SamplingParams
from tiny_model import VOCAB, one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

SP = SamplingParams(max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return tiny_model_dir(str(tmp_path_factory.mktemp("tiny")))


def mixed_prompts(seed=0, lens=(3, 40, 17, 64, 9, 25, 51, 5)):
    rng = random.Random(seed)
    shared = [rng.randrange(VOCAB) for _ in range(20)]
    prompts = [[rng.randrange(VOCAB) for _ in range(n)] for n in lens]
    return prompts + [shared + [1, 2, 3], shared + [4, 5]]  # two share a prefix


def run(sched, prompts, sp=SP, first_uid=0):
    """Drive the scheduler directly until idle; return each request's output ids."""
    reqs = [sched.add_request(first_uid + i, p, sp) for i, p in enumerate(prompts)]
    while not sched.idle:
        sched.step()
    return [r.output_ids for r in reqs]


def assert_clean(llm):
    s = llm.scheduler
    assert s.idle
    s.check_integrity()
    pool = llm.engine.pool
    assert sorted(pool.free_rows) == list(range(pool.dummy_row))  # every table row free
    assert pool.num_free_pages + s.cache.size // pool.page_size == pool.num_pages


@pytest.mark.parametrize("ps,budget", [(1, 8192), (4, 16), (1, 24)])
def test_overlap_equals_normal(path, ps, budget):
    prompts = mixed_prompts()
    outs = {}
    for overlap in (False, True):
        llm = tiny_llm(path, page_size=ps, max_prefill_tokens=budget, overlap=overlap)
        outs[overlap] = run(llm.scheduler, prompts)
        assert all(len(o) == SP.max_tokens for o in outs[overlap])
        assert_clean(llm)
    assert outs[True] == outs[False]


def staggered(sched, prompts, sp=SP, abort=()):
    """Requests arriving two steps apart while the earlier ones decode (uids in `abort` are aborted when the
    next arrives); return each request's output ids and, by uid, the loop iterations its tokens came out in."""
    reqs, when, it = [], {}, 0

    def step():
        nonlocal it
        for o in sched.step():
            when.setdefault(o.uid, []).append(it)
        it += 1
    for i, p in enumerate(prompts):
        reqs.append(sched.add_request(i, p, sp))
        if i - 1 in abort:
            sched.abort(i - 1)
        step()
        step()
    while not sched.idle:
        step()
    return [r.output_ids for r in reqs], when


@pytest.mark.parametrize("ps,budget,overlap", [(1, 24, False), (4, 16, True), (1, 8192, True)])
def test_mixed_chunk_equals_prefill_first(path, ps, budget, overlap):
    """Decode rows riding in prefill steps (mixed_chunk) give the tokens of prefill-first steps, free everything,
    and no running request ever waits an iteration without a token (prefill-first makes some wait)."""
    prompts, outs, gaps = mixed_prompts(), {}, {}
    for mixed in (False, True):
        llm = tiny_llm(path, page_size=ps, max_prefill_tokens=budget, overlap=overlap, mixed_chunk=mixed)
        outs[mixed], when = staggered(llm.scheduler, prompts, abort={3})
        gaps[mixed] = sum(b - a - 1 for its in when.values() for a, b in zip(its, its[1:]))
        assert ("mixed" in {st.phase for st in llm.scheduler.stats}) == mixed
        assert_clean(llm)
    assert outs[True] == outs[False]
    assert gaps[True] == 0 < gaps[False]


def note_early_admissions(sched) -> list[int]:
    """Wrap `sched.wait`: the uids each early admission (inside `wait`) took in, in order."""
    taken, wait = [], sched.wait

    def noted(event):
        before = {r.uid for r in sched.admitted.added} if sched.admitted else set()
        wait(event)
        taken.extend(r.uid for r in (sched.admitted.added if sched.admitted else []) if r.uid not in before)
    sched.wait = noted
    return taken


@pytest.mark.parametrize("ps,budget,mixed", [(1, 16, True), (4, 16, True), (1, 24, False)])
def test_early_admission_runs_the_same_steps(path, ps, budget, mixed):
    """The overlap loop admitting the next step's requests while step N's tokens travel (early_admit: here the
    chunked prompts' next chunks) runs the same steps, with the same tokens, as admission in `schedule`, and
    frees everything, an abort included."""
    prompts, outs, steps = mixed_prompts(), {}, {}
    for early in (False, True):
        llm = tiny_llm(path, page_size=ps, max_prefill_tokens=budget, overlap=True, mixed_chunk=mixed, early_admit=early)
        taken = note_early_admissions(llm.scheduler)
        outs[early], _ = staggered(llm.scheduler, prompts, abort={3})
        steps[early] = [(st.phase, st.batch_size, st.tokens) for st in llm.scheduler.stats]
        assert bool(taken) == early
        assert_clean(llm)
    assert outs[True] == outs[False] and steps[True] == steps[False]


def wrong_abort(self, uid):
    """A mutant: the abort a reader might keep, which looks for the request in `pending` only."""
    from minisgl_edu.scheduler import TokenOutput
    req = self.live.get(uid)
    if req is None:
        return []
    if req in self.pending:
        self.pending.remove(req)
    self._finish(req, "abort")
    return [TokenOutput(uid, -1, True, "abort", prompt_len=req.prompt_len)]


@pytest.mark.parametrize("wrong", [None, "abort looks in pending only"])
def test_abort_of_an_early_admitted_request(path, monkeypatch, wrong):
    """A request admitted early holds a row and a locked prefix without being in `pending` or `running`: aborted
    there, it never reaches a step and gives everything back, and the others' tokens are untouched. The check is
    shown failing on an abort that looks in `pending` only."""
    from minisgl_edu.scheduler import Scheduler
    if wrong:
        monkeypatch.setattr(Scheduler, "abort", wrong_abort)
    prompts = mixed_prompts(4)
    ref = run(tiny_llm(path).scheduler, prompts)
    llm = tiny_llm(path, max_prefill_tokens=16, overlap=True, early_admit=True)
    s, victim = llm.scheduler, None
    launch = s.launch

    def checked_launch(batch):
        assert not [r.uid for r in batch.reqs if r.finish_reason == "abort"], "an aborted request launched"
        return launch(batch)
    s.launch = checked_launch
    reqs = [s.add_request(i, p, SP) for i, p in enumerate(prompts)]
    with pytest.raises(AssertionError, match="aborted request launched") if wrong else nullcontext():
        while not s.idle:
            s.step()
            if victim is None and s.admitted is not None:  # admitted while the last step's tokens travelled
                victim = s.admitted.added[-1]
                assert s.abort(victim.uid)[0].finish_reason == "abort"
            s.check_integrity()
        assert victim is not None and victim.table_idx == -1
        for r, want in zip(reqs, ref):
            assert r.finish_reason == "abort" if r is victim else r.output_ids == want
        assert_clean(llm)


@pytest.mark.parametrize("wrong", [None, "idle ignores the early admission"])
def test_a_request_admitted_after_the_last_step_is_not_forgotten(path, monkeypatch, wrong):
    """A request that arrives while the last running request's final step travels is admitted in `wait`, after
    which nothing runs, waits or is in flight: the loop is not idle until it has run (with `idle` blind to the
    early admission, the loop stops and the request is never served)."""
    from minisgl_edu.scheduler import Scheduler
    if wrong:
        monkeypatch.setattr(Scheduler, "idle", property(lambda s: not s.pending and not s.running and s.in_flight is None))
    llm = tiny_llm(path, overlap=True, early_admit=True)
    s = llm.scheduler
    first = s.add_request(0, mixed_prompts()[0], SamplingParams(max_tokens=2, ignore_eos=True))
    late = []

    def arrive():  # the mail read while waiting (the server's receive_early): once nothing runs any more
        if not late and not s.running and s.in_flight is None:
            late.append(s.add_request(1, mixed_prompts()[1], SP))
    s.while_waiting = arrive
    taken = note_early_admissions(s)
    while not s.idle:
        s.step()
    assert late and first.finish_reason == "length" and taken == [1]
    with pytest.raises(AssertionError) if wrong else nullcontext():
        assert late[0].output_ids == run(tiny_llm(path).scheduler, [mixed_prompts()[1]])[0]
        assert_clean(llm)


def test_mixed_prefill_tokens_caps_the_steps_decode_rows_ride_in(path):
    """With --mixed-prefill-tokens 8 every mixed step extends at most 8 prompt tokens (a prefill step with nothing
    running keeps the full budget), long prompts are chunked across mixed steps, and the tokens do not change."""
    prompts, outs = sorted(mixed_prompts(), key=len, reverse=True), {}  # the first: 64 tokens, nothing decoding
    for cap in (None, 8):
        llm = tiny_llm(path, max_prefill_tokens=64, mixed_chunk=True, mixed_prefill_tokens=cap)
        outs[cap], _ = staggered(llm.scheduler, prompts)
        stats = llm.scheduler.stats
        mixed = [st.tokens - st.decode_rows for st in stats if st.phase == "mixed"]
        assert mixed and max(mixed) <= (8 if cap else 64)
        assert_clean(llm)
    assert stats[0].phase == "prefill" and stats[0].tokens == 64  # the first step: nothing decodes yet
    assert outs[8] == outs[None]


def backlog_run(path, limit):
    """A 5-token request decoding, then one 40-token prompt (backlog 40), then three at once (backlog 120), with
    max_prefill_tokens 64 and mixed_prefill_tokens 8: the prompt tokens of each mixed step after each arrival,
    and every request's output ids."""
    rng = random.Random(5)
    first, prompts = [rng.randrange(VOCAB) for _ in range(5)], [[rng.randrange(VOCAB) for _ in range(40)] for _ in range(3)]
    llm = tiny_llm(path, max_prefill_tokens=64, mixed_chunk=True, mixed_prefill_tokens=8, mixed_backlog_tokens=limit)
    sched, extended = llm.scheduler, []
    reqs = [sched.add_request(0, first, SP)]
    sched.step()  # nothing decodes yet: a plain prefill step
    for group in (prompts[:1], prompts):
        reqs += [sched.add_request(len(reqs) + i, p, SP) for i, p in enumerate(group)]
        start = len(sched.stats)
        while any(r.device_len < r.prompt_len for r in reqs):
            sched.step()
        extended.append(max(st.tokens - st.decode_rows for st in list(sched.stats)[start:] if st.phase == "mixed"))
    while not sched.idle:
        sched.step()
    assert_clean(llm)
    return extended, [r.output_ids for r in reqs]


def test_mixed_backlog_tokens_gives_a_queue_the_full_budget(path):
    """--mixed-backlog-tokens 48: one waiting 40-token prompt goes in mixed steps of at most 8 tokens; three at once
    (backlog 120) get the full budget of 64 in their first mixed step; the tokens do not change."""
    (one, three), out = backlog_run(path, 48)
    assert (one, three) == (8, 64)
    (one, three), plain = backlog_run(path, None)  # no limit: the mixed budget whatever waits
    assert (one, three) == (8, 8)
    assert out == plain


@pytest.mark.parametrize("wrong", ["backlog ignored", "always the full budget", "only the first prompt counted"])
def test_mixed_backlog_check_catches_wrong_budgets(path, monkeypatch, wrong):
    """The check above fails on the wrong rules a reader might write for Scheduler.token_budget."""
    from minisgl_edu.scheduler import Scheduler
    rule = {"backlog ignored": lambda self: self.mixed_prefill_tokens,
            "always the full budget": lambda self: self.max_prefill_tokens,
            "only the first prompt counted": lambda self: self.max_prefill_tokens if self.pending and
            self.pending[0].prompt_len > self.mixed_backlog_tokens else self.mixed_prefill_tokens}[wrong]
    monkeypatch.setattr(Scheduler, "token_budget", rule)
    assert backlog_run(path, 48)[0] != [8, 64]


def lanes_run(path, lanes, backlog_limit=48):
    """One request decoding, then four 6-token prompts at once (backlog 24), with a mixed budget of 32 and the
    prompt graphs' lanes set to `lanes` (None: no limit, as without graphs): the prompts each mixed step took
    while they waited, and every request's output ids."""
    rng = random.Random(7)
    prompts = [[rng.randrange(VOCAB) for _ in range(6)] for _ in range(5)]
    llm = tiny_llm(path, max_prefill_tokens=64, mixed_chunk=True, mixed_prefill_tokens=32,
                   mixed_backlog_tokens=backlog_limit)
    sched = llm.scheduler
    sched.mixed_lanes = lanes  # on CUDA: PREFILL_LANES - 1 when prompt graphs exist
    reqs = [sched.add_request(0, prompts[0], SP)]
    sched.step()
    reqs += [sched.add_request(i, p, SP) for i, p in enumerate(prompts[1:], 1)]
    start, taken = len(sched.stats), []
    while any(r.device_len < r.prompt_len for r in reqs):
        sched.step()
    taken = [st.batch_size - st.decode_rows for st in list(sched.stats)[start:] if st.phase == "mixed"]
    while not sched.idle:
        sched.step()
    assert_clean(llm)
    return taken, [r.output_ids for r in reqs]


def test_a_short_queues_mixed_step_takes_at_most_the_prompt_graphs_lanes(path):
    """While the mixed budget applies, a mixed step takes at most `mixed_lanes` prompts (a prompt graph's lanes:
    more would run without a graph); a queue past --mixed-backlog-tokens gets them all at once; tokens unchanged."""
    taken, out = lanes_run(path, 3)
    assert taken == [3, 1]
    free, plain = lanes_run(path, None)  # no limit (the CPU's default: no graphs)
    assert free == [4] and out == plain
    queue, _ = lanes_run(path, 3, backlog_limit=16)  # 24 tokens waiting > 16: the full budget, no lanes limit
    assert queue == [4]


def test_lanes_check_catches_a_limit_that_ignores_the_queue_rule(path, monkeypatch):
    """A wrong rule a reader might write: the lanes limit on every mixed step, long queue or not."""
    from minisgl_edu.scheduler import Scheduler
    monkeypatch.setattr(Scheduler, "token_budget", lambda self: self.mixed_prefill_tokens)  # the queue rule forgotten
    assert lanes_run(path, 3, backlog_limit=16)[0] != [4]


def test_mixed_backlog_tokens_without_a_mixed_budget_is_refused_off_cuda(path):
    with pytest.raises(ValueError, match="mixed_backlog_tokens"):
        tiny_llm(path, mixed_backlog_tokens=48)  # the CPU has no default mixed budget: it would change nothing
    with pytest.raises(ValueError, match="mixed_backlog_tokens"):
        tiny_llm(path, mixed_prefill_tokens=8, mixed_backlog_tokens=0)


def check_budget_rule(model_dir: str, monkeypatch) -> None:
    """On CUDA the mixed budget defaults to the largest prompt-graph capacity (less its 3 padding rows) whose prompt
    work, 2 x non-embedding parameters x tokens, fits MIXED_STEP_FLOPS; the
    smallest graph when none fits; the largest when all fit (a larger mixed step would run eager); the plain bound
    without prompt graphs (either graph switch at 0)."""
    from minisgl_edu import scheduler
    from minisgl_edu.graphs import extend_capacities
    eng = tiny_llm(model_dir).engine
    assert extend_capacities(eng.cfg.cuda_graph_max_extend)[-1] <= eng.max_seq_len
    params = sum(p.numel() for n, p in eng.model.named_parameters() if "embed" not in n and "lm_head" not in n)
    assert scheduler.active_params(eng.model) == params  # a dense model: every parameter
    caps = extend_capacities(eng.cfg.cuda_graph_max_extend)
    assert scheduler.mixed_tokens_for(eng) == caps[-1] - 3  # a tiny model: its largest prompt graph, not more (eager)
    for tokens in (300, 600, 1100):  # a budget between captured capacities
        monkeypatch.setattr(scheduler, "MIXED_STEP_FLOPS", 2 * params * tokens)
        got = scheduler.mixed_tokens_for(eng)
        cap = max(c for c in extend_capacities(eng.cfg.cuda_graph_max_extend) if c <= tokens)
        assert got == cap - 3 and 2 * params * (got + 3) <= scheduler.MIXED_STEP_FLOPS
    monkeypatch.setattr(scheduler, "MIXED_STEP_FLOPS", 2 * params * 40)  # below the smallest graph: that graph, whole
    assert scheduler.mixed_tokens_for(eng) == extend_capacities(eng.cfg.cuda_graph_max_extend)[0] - 3
    object.__setattr__(eng.cfg, "cuda_graph_max_extend", 0)  # no prompt graphs (eager steps): the bound itself
    assert scheduler.mixed_tokens_for(eng) == 40
    monkeypatch.setattr(scheduler, "MIXED_STEP_FLOPS", 2 * params * 1100)
    assert scheduler.mixed_tokens_for(eng) == 1100
    object.__setattr__(eng.cfg, "cuda_graph_max_extend", 2048)
    object.__setattr__(eng.cfg, "cuda_graph_max_bs", 0)  # no graphs at all: eager too
    assert scheduler.mixed_tokens_for(eng) == 1100


def test_default_mixed_budget_follows_the_models_size(tmp_path, monkeypatch):
    """(A 4k context: every capacity is captured; the 256-position tiny model would capture only the first.)"""
    check_budget_rule(tiny_model_dir(str(tmp_path), max_positions=4096), monkeypatch)


def wrong_budget(kind: str):
    """Wrong default-budget rules the check must catch: session 12's (no floor), the padding rows counted as prompt
    rows, graph capacities assumed although graphs are off, and no cap when every graph fits (then a larger mixed step
    runs without a graph)."""
    from minisgl_edu import scheduler
    from minisgl_edu.graphs import extend_capacities

    def rule(engine):
        bound = int(scheduler.MIXED_STEP_FLOPS // (2 * scheduler.active_params(engine.model)))
        cfg = engine.cfg
        on = cfg.cuda_graph_max_extend > 0 and (kind == "graphs off ignored" or cfg.cuda_graph_max_bs > 0)
        caps = extend_capacities(cfg.cuda_graph_max_extend) if on else []
        if not caps or (kind == "no cap when all fit" and bound >= caps[-1]):  # the rule before session 25
            return None if caps else max(bound, 1)
        fits = [c for c in caps if c <= bound]
        if not fits:
            return bound if kind == "no floor" else caps[0] - 3
        return fits[-1] - (0 if kind == "padding rows counted" else 3)
    return rule


@pytest.mark.parametrize("kind", ["no floor", "padding rows counted", "graphs off ignored", "no cap when all fit"])
def test_budget_rule_check_catches_wrong_rules(tmp_path, monkeypatch, kind):
    from minisgl_edu import scheduler
    monkeypatch.setattr(scheduler, "mixed_tokens_for", wrong_budget(kind))
    with pytest.raises(AssertionError):
        check_budget_rule(tiny_model_dir(str(tmp_path), max_positions=4096), monkeypatch)


def test_overlap_stops_on_eos_like_normal(path):
    prompts = mixed_prompts(1)
    ref = run(tiny_llm(path).scheduler, prompts)
    eos = ref[0][3]  # a token the first request produces mid-way: call it EOS
    expect = [o[: o.index(eos) + 1] if eos in o else o for o in ref]
    for overlap in (False, True):
        llm = tiny_llm(path, overlap=overlap)
        llm.scheduler.eos = {eos}
        got = run(llm.scheduler, prompts, SamplingParams(max_tokens=10))
        assert got == expect  # the overlap loop drops the token computed after EOS
        assert_clean(llm)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("ps", [1, 4])
def test_aborts_free_everything(path, ps, overlap):
    prompts = mixed_prompts(2)
    ref = run(tiny_llm(path, page_size=ps).scheduler, prompts)
    llm = tiny_llm(path, page_size=ps, max_prefill_tokens=16, overlap=overlap, max_running_reqs=4)
    s = llm.scheduler
    reqs = [s.add_request(i, p, SP) for i, p in enumerate(prompts)]
    victims = {}
    pending = reqs[-1]  # waits behind the others: only 4 table rows
    assert s.abort(pending.uid)[0].finish_reason == "abort"
    victims[pending.uid] = "pending"
    for _ in range(200):
        if s.idle:
            break
        s.step()
        chunked = next((r for r in s.pending if r.table_idx >= 0), None)
        if chunked is not None and "chunked" not in victims.values():
            assert chunked.is_chunked or chunked.cached_len < chunked.prompt_len
            s.abort(chunked.uid)
            victims[chunked.uid] = "chunked"
        running = [r for r in s.running if len(r.output_ids) >= 2 and r.uid not in victims]
        if running and "running" not in victims.values():
            s.abort(running[0].uid)
            victims[running[0].uid] = "running"
        s.check_integrity()  # after every step, not only at the end
    assert sorted(victims.values()) == ["chunked", "pending", "running"]
    assert s.abort(pending.uid) == []  # aborting twice is a no-op
    for r, want in zip(reqs, ref):
        if r.uid in victims:
            assert r.finish_reason == "abort" and r.table_idx == -1
        else:  # the others are untouched
            assert r.output_ids == want and r.finish_reason == "length"
    assert_clean(llm)


@pytest.mark.parametrize("ps", [1, 4])
def test_small_kv_pool_waits_and_gives_same_tokens(path, ps):
    prompts = mixed_prompts(3)
    big = tiny_llm(path, page_size=ps)
    small = tiny_llm(path, page_size=ps, max_total_tokens=96)  # two or three requests at a time
    want = run(big.scheduler, prompts)
    got = run(small.scheduler, prompts)
    assert got == want
    assert max(st.batch_size for st in small.scheduler.stats if st.phase == "decode") < len(prompts)
    assert_clean(small)
    # a second wave into the small pool must evict what the first left in the cache
    assert small.scheduler.cache.size > 0
    assert run(small.scheduler, prompts[::-1], first_uid=100) == want[::-1]
    assert_clean(small)


def test_request_that_can_never_fit_is_refused_at_once(path):
    llm = tiny_llm(path, max_total_tokens=64)
    s = llm.scheduler
    with pytest.raises(ValueError, match="KV pages"):
        s.add_request(0, list(range(60)), SamplingParams(max_tokens=10))
    assert s.idle and not s.live
    assert run(s, [list(range(50))], SamplingParams(max_tokens=14, ignore_eos=True))[0]  # 64 exactly fits
    assert_clean(llm)
    with pytest.raises(ValueError, match="already in use"):
        s.add_request(7, [1], SP)
        s.add_request(7, [2], SP)
    s.abort(7)
    with pytest.raises(ValueError, match=r"token ids must lie"):
        s.add_request(8, [VOCAB], SP)
    assert_clean(llm)


# ---- reading the mail while the GPU works (the server's rank loop, one rank, overlap) ------------------------
class ScriptedMailbox:
    """A rank's inbox that delivers each scripted batch of messages once its trigger (a function of the scheduler)
    holds: the fake end of the ZMQ pull socket `receive_early` and `tp.receive` read."""

    def __init__(self, sched, script):
        self.sched, self.script, self.waiting = sched, list(script), []

    def _arrive(self):
        from minisgl_edu.messages import encode
        while self.script and self.script[0][0](self.sched):
            self.waiting += [encode(m) for m in self.script.pop(0)[1]]

    def ready(self) -> bool:
        self._arrive()
        return bool(self.waiting)

    def drain_raw(self) -> list[bytes]:
        self._arrive()
        out, self.waiting = self.waiting, []
        return out

    def get_raw(self, timeout_ms=None):
        self._arrive()
        return self.waiting.pop(0) if self.waiting else None


class ScriptedIO:
    rank, size = 0, 1

    def __init__(self, mailbox):
        self.mailbox, self.sent = mailbox, []

    def take(self, block: bool) -> list[bytes]:
        return self.mailbox.drain_raw()

    def forward(self, raws) -> None:
        pass

    def send(self, msgs) -> None:
        self.sent += msgs


def run_rank_loop(path, early: bool, receive_early=None, cache: str = "radix"):
    """Two requests, then -- once step 3 is launched -- [a new request C, an abort of the first, a new request D],
    then an ExitMsg once idle, through scheduler_proc.scheduler_loop (one rank, overlap loop, CPU). Checks on every
    row release that no step in flight still writes that row. Returns (tokens by uid, where each uid was handled)."""
    from minisgl_edu.config import ServerConfig
    from minisgl_edu.messages import AbortMsg, ExitMsg, UserMsg
    from minisgl_edu.server import scheduler_proc as sp
    import torch
    rng = random.Random(7)
    prompts = {u: [rng.randrange(VOCAB) for _ in range(n)] for u, n in enumerate((12, 30, 21, 9))}
    user = lambda u, n: UserMsg(u, torch.tensor(prompts[u], dtype=torch.int32), SamplingParams(max_tokens=n, ignore_eos=True))
    sched = tiny_llm(path, overlap=True, cache=cache).scheduler
    script = [(lambda s: True, [user(0, 40), user(1, 8)]),
              (lambda s: s.steps_done >= 3, [user(2, 8), AbortMsg(0), user(3, 8)]),
              (lambda s: s.idle and s.steps_done > 3, [ExitMsg()])]
    io = ScriptedIO(ScriptedMailbox(sched, script))
    cfg = ServerConfig(model_path=path, device="cpu", overlap=True, early_receive=early)
    st = sp.Rank(sched, io, cfg, "scheduler-rank0", columns=True)
    if early:
        sched.while_waiting = lambda: (receive_early or sp.receive_early)(st)
    rows_at_launch, where = {}, {}
    launch, release, add, abort = sched.launch, sched.pool.release_row, sched.add_request, sched.abort

    def launch_and_note(batch):
        rows_at_launch[id(batch)] = {r.table_idx for r in batch.reqs}
        return launch(batch)

    def checked_release(row):  # the rule deferred_rows keeps: the step in flight may still write its rows
        if sched.in_flight is not None:
            assert row not in rows_at_launch[id(sched.in_flight[0])], f"row {row} released while a step writes it"
        release(row)

    def noted(fn, uid_of):
        def call(*a):
            where[uid_of(*a)] = "in step" if stepping[0] else "at the top"
            return fn(*a)
        return call
    stepping, step = [False], sched.step

    def marked_step():
        stepping[0] = True
        try:
            return step()
        finally:
            stepping[0] = False
    sched.launch, sched.pool.release_row, sched.step = launch_and_note, checked_release, marked_step
    sched.add_request, sched.abort = noted(add, lambda u, *_: u), noted(abort, lambda u: ("abort", u))
    sp.scheduler_loop(st)
    assert not st.counters.last_emit, f"the emission clock still times ended requests {st.counters.last_emit}"
    tokens = {}
    for m in io.sent:
        for r in (m.rows() if hasattr(m, "rows") else [m]):
            if getattr(r, "next_token", -1) >= 0:
                tokens.setdefault(r.uid, []).append(r.next_token)
    sched.check_integrity()
    return tokens, where, prompts


def test_early_receive_admits_new_requests_and_leaves_aborts_for_the_top(path):
    """While a step's tokens travel, a new request joins the queue (`receive_early`); the abort behind it, and the
    request behind the abort, wait for the loop's top, in order. Tokens equal the loop without it, and the offline
    engine's; no row is released while a step in flight writes it; every page is back."""
    tokens, where, prompts = run_rank_loop(path, early=True)
    assert where == {0: "at the top", 1: "at the top", 2: "in step", ("abort", 0): "at the top", 3: "at the top"}
    plain, where_plain, _ = run_rank_loop(path, early=False)
    assert set(where_plain.values()) == {"at the top"}
    assert {u: t for u, t in tokens.items() if u} == {u: t for u, t in plain.items() if u}
    offline = tiny_llm(path).generate([prompts[u] for u in (1, 2, 3)], SamplingParams(max_tokens=8, ignore_eos=True))
    assert [tokens[u] for u in (1, 2, 3)] == [o["token_ids"] for o in offline]
    assert 0 < len(tokens[0]) < 40  # aborted mid-way


def test_emission_clock_forgets_aborted_requests(path, monkeypatch):
    """An abort ends a request outside any step, so the loop tells the emission clock (SchedulerCounters.forget);
    the wrong loop that leaves it to the step's finished tokens keeps the aborted request for the server's life."""
    from minisgl_edu.server.metrics import SchedulerCounters
    monkeypatch.setattr(SchedulerCounters, "forget", lambda self, uids: None)
    with pytest.raises(AssertionError, match=r"still times ended requests \{0: "):  # request 0, the aborted one
        run_rank_loop(path, early=True)


@pytest.mark.parametrize("cache,caught", [("radix", None), ("naive", "released while a step writes it")])
def test_early_receive_check_catches_an_abort_handled_while_waiting(path, cache, caught):
    """The wrong rule a reader might write: handle every message while waiting, the abort too. The abort then
    finishes a request mid-step, between step N+1's launch (its ledger advanced) and step N's tokens: the radix
    cache is handed positions whose tokens have not arrived (the tree's own length check fails); the naive cache
    takes nothing, and the request's row is released while step N+1, in flight, still writes it (the check above)."""
    from minisgl_edu.messages import decode, unbatch
    from minisgl_edu.server import scheduler_proc as sp

    def handle_everything(st):
        for raw in st.io.mailbox.drain_raw():
            for m in unbatch(decode(raw)):
                st.early_replies += sp.handle(st, m)
    with pytest.raises(AssertionError, match=caught):
        run_rank_loop(path, early=True, receive_early=handle_everything, cache=cache)
