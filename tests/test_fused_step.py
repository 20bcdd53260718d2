"""Chapter 7 / issue 16 — the lean step (`lean_step=True`) against its plain twin, on the CPU.

The lean step sends a step's arrays to the device in one copy (`engine.step_layout`), reuses a decode
batch's sampling tensors while its requests stay (`sampling.SamplingCache`) and, for a greedy batch with
no control, takes the argmax of the LM head's own logits. None of that may change a token: the same
workload with every sampling control, chunked prefill, page sizes 1 and 4, overlap on and off gives the
same tokens, finish reasons and logprobs either way.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest
import torch

from minisgl_edu import SamplingParams
from minisgl_edu.paging import extend_spans
from minisgl_edu.req import Batch, Req
from minisgl_edu.sampling import SamplingCache, SamplingTensors, per_step, plain_greedy
from tiny_model import one_thread, tiny_llm, tiny_model_dir  # noqa: F401 (fixture)

V = 97


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model_dir(str(tmp_path_factory.mktemp("lean")), vocab=V)


def mixed_params() -> list[SamplingParams]:
    base = dict(max_tokens=10, ignore_eos=True)
    return [SamplingParams(**base), SamplingParams(**base, temperature=0.8, seed=7),
            SamplingParams(**base, temperature=1.0, top_k=5, top_p=0.9),
            SamplingParams(**base, repetition_penalty=1.4, presence_penalty=0.5),
            SamplingParams(**base, logit_bias=((3, 2.0),), logprobs=3),
            SamplingParams(max_tokens=10, min_tokens=4, stop_token_ids=(11, 12)),
            SamplingParams(**base, temperature=0.7, min_p=0.1)]


def run(llm, prompts, params):
    sched, outs = llm.scheduler, {}
    for uid, (p, sp) in enumerate(zip(prompts, params)):
        sched.add_request(uid, p, sp)
    while not sched.idle:
        for o in sched.step():
            outs.setdefault(o.uid, []).append((o.token_id, o.finish_reason, o.logprobs))
    sched.check_integrity()
    return outs


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("page_size,overlap", [(1, False), (4, True)])
def test_lean_step_gives_the_plain_steps_tokens(tiny, page_size, overlap):
    g = np.random.default_rng(0)
    prompts = [g.integers(0, V, n).tolist() for n in (5, 23, 9, 40, 3, 17, 30)]
    params = mixed_params()
    got = {lean: run(tiny_llm(tiny, lean_step=lean, page_size=page_size, overlap=overlap, max_prefill_tokens=16),
                     prompts, params) for lean in (False, True)}
    assert got[True] == got[False]
    assert any(lp is not None for o in got[True].values() for _, _, lp in o)  # logprobs were compared too


class HeadRunner:
    """On the CPU, what a decode graph with the head (`graphs.GraphRunner`, graph_head) leaves an engine: the hidden
    states, the logits of every row, their argmax, and that argmax written into the token pool at `sample_at`."""
    head = True

    def __init__(self, engine):
        self.engine, self.replays = engine, 0

    def key(self, batch):
        return None if batch.is_prefill else (batch.size, 0)

    def replay(self, batch, sample_at=None):
        eng = self.engine
        h = eng.model(batch.input_ids, batch.positions, eng.backend, batch)
        self.logits = eng.model.logits(h)
        self.tokens = self.logits.argmax(-1).int()
        rows, pos = sample_at if sample_at is not None else (  # the plain step passes none: the requests say
            torch.tensor([[r.table_idx for r in batch.reqs], [r.device_len for r in batch.reqs]]))
        eng.pool.token_pool[rows, pos] = self.tokens  # greedy.cu's write, before any sampler runs
        self.replays += 1
        return h

    def head_out(self, batch):
        return self.logits, self.tokens


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("lean", [True, False])
def test_the_graphs_head_serves_plain_greedy_rows_only(tiny, lean):
    """Engine._forward with a decode graph that ran the LM head and the argmax (graph_head): a plain greedy batch
    returns the graph's tokens, every other batch samples from the graph's logits and overwrites the graph's token in
    the pool. Every sampling control, chunked prefill and the overlap loop give the tokens, finish reasons and logprobs
    of an engine without graphs. The mutant trusts the graph's argmax for any batch, and is caught."""
    import types

    from minisgl_edu.engine import Engine
    from minisgl_edu.exercises.swap import patched
    g = np.random.default_rng(1)
    prompts = [g.integers(0, V, n).tolist() for n in (5, 23, 9, 40, 3, 17, 30)]
    params = mixed_params()
    greedy_only = [SamplingParams(max_tokens=10, ignore_eos=True)] * 3
    sets = (("mixed", params), ("greedy", greedy_only), ("no logprobs", [p for p in params if p.logprobs is None]))
    want = {name: run(tiny_llm(tiny, lean_step=lean, overlap=True, max_prefill_tokens=16), prompts[:len(ps)], ps)
            for name, ps in sets}
    trusting = patched("minisgl_edu.engine:Engine._forward", (
        "if st.plain_greedy and head is not None and head[1] is not None:", "if head is not None and head[1] is not None:"))
    for wrong, forward in ((False, Engine._forward),) + (((True, trusting),) if lean else ()):  # (the plain step
        for name, ps in sets:                                                                # has no shortcut)
            llm = tiny_llm(tiny, lean_step=lean, overlap=True, max_prefill_tokens=16)
            eng = llm.engine
            eng.graphs = runner = HeadRunner(eng)
            eng._forward = types.MethodType(forward, eng)
            try:
                got = run(llm, prompts[:len(ps)], ps)
            except AttributeError:  # the mutant's step made no logprobs for the request that asked
                assert wrong and name == "mixed"
                continue
            assert runner.replays >= 5  # the decode steps all went through the head
            assert (got == want[name]) == (not wrong or name == "greedy"), (wrong, name)


@pytest.mark.usefixtures("one_thread")
def test_step_layout_equals_extend_spans(tiny):
    """Every step's one-copy layout holds what the plain twin computes array by array."""
    llm = tiny_llm(tiny, page_size=4, max_prefill_tokens=16)
    eng, seen = llm.engine, []
    prepare = eng.prepare

    def checked(batch):
        last = prepare(batch)
        lay = eng.layout
        _, ext, rows, pos = extend_spans(batch.reqs)
        sampled = [r for r in batch.reqs if not r.is_chunked]
        assert lay.rows.tolist() == rows.tolist() and lay.positions.tolist() == pos.tolist()
        assert lay.sample_rows == [i for i, r in enumerate(batch.reqs) if not r.is_chunked]
        assert last.tolist() == (np.cumsum(ext) - 1)[lay.sample_rows].tolist()
        assert lay.sample_table_rows.tolist() == [r.table_idx for r in sampled]
        assert lay.sample_device_len.tolist() == [r.device_len for r in sampled]
        if lay.last_rows is not None:
            assert lay.last_rows.tolist() == last.tolist()
        seen.append((batch.phase, lay.last_rows is None))
        return last
    eng.prepare = checked
    g = np.random.default_rng(1)
    run(llm, [g.integers(0, V, n).tolist() for n in (30, 4, 12)], [SamplingParams(max_tokens=4, ignore_eos=True)] * 3)
    assert ("prefill", False) in seen and ("decode", True) in seen  # a chunked prefill gathered; decode did not


def reqs_at(params: list[SamplingParams], device_len: int = 6) -> list[Req]:
    reqs = [Req(i, list(range(5)), sp) for i, sp in enumerate(params)]
    for i, r in enumerate(reqs):
        r.table_idx, r.cached_len, r.device_len = i, device_len - 1, device_len
    return reqs


def test_sampling_cache_reuses_only_what_does_not_change_per_step():
    cpu, cache = torch.device("cpu"), SamplingCache()
    plain = reqs_at([SamplingParams(), SamplingParams(temperature=0.5, top_k=3), SamplingParams(logprobs=2)])
    st = cache.get(plain, V, cpu)
    assert cache.get(list(plain), V, cpu) is st  # same requests, new list: reused
    assert cache.get(plain[:2], V, cpu) is not st  # one left: rebuilt
    seeded = reqs_at([SamplingParams(), SamplingParams(temperature=0.8, seed=3)])
    st1 = cache.get(seeded, V, cpu)
    for r in seeded:
        r.complete_one()
    st2 = cache.get(seeded, V, cpu)
    assert st2 is not st1 and st2.seeds != st1.seeds  # the seed is mixed with the position: fresh every step
    assert st2.seeds == SamplingTensors.from_reqs(seeded, V, cpu).seeds
    assert [per_step(r) for r in reqs_at([SamplingParams(), SamplingParams(min_tokens=2, max_tokens=4),
                                          SamplingParams(frequency_penalty=0.5),
                                          SamplingParams(temperature=0.0, seed=1)])] == [False, True, True, False]


@pytest.mark.parametrize("kw,plain", [({}, True), ({"logprobs": 0}, False), ({"logit_bias": ((1, 1.0),)}, False),
                                      ({"min_tokens": 2}, False), ({"temperature": 0.5}, False),
                                      ({"repetition_penalty": 1.2}, False), ({"top_k": 3}, True)])
def test_plain_greedy_only_without_controls(kw, plain):
    """Only a plain greedy batch may skip the float32 logits (top_k without temperature is still greedy)."""
    reqs = reqs_at([SamplingParams(), SamplingParams(**kw)])
    st = SamplingTensors.from_reqs(reqs, V, torch.device("cpu"), eos_token_ids=(0,))
    assert st.plain_greedy is plain
    assert plain_greedy(reqs[1]) is plain  # decided once per request: the cache's shortcut below relies on it
    cache = SamplingCache()
    via_cache = cache.get(reqs, V, torch.device("cpu"), eos_token_ids=(0,))
    assert via_cache.plain_greedy is plain and (via_cache.temperature is None) is (kw.get("temperature", 0) == 0)
    if plain:  # the shortcut is remembered too: the next step of the same batch is one identity check
        assert cache.get(list(reqs), V, torch.device("cpu"), eos_token_ids=(0,)) is via_cache


def _layout_ok(lin, w, x, y) -> bool:
    """Same shape and values, column-major strides, same product."""
    return (tuple(lin.weight.shape) == tuple(w.shape) and lin.weight.stride() == (1, w.shape[0])
            and torch.equal(lin.weight, w) and torch.allclose(lin(x), y, atol=1e-5))


def test_column_major_o_proj_is_a_layout_not_a_computation():
    """The CUDA engine stores o_proj column-major (model.layers.column_major): same shape, same values, same
    product; only the strides change. The check rejects the wrong layouts kept below."""
    from minisgl_edu.model.layers import RowParallelLinear, column_major
    wrong = {"row-major (no-op)": lambda lin: None,
             "a transposed copy": lambda lin: setattr(lin.weight, "data", lin.weight.data.t().contiguous())}
    for name, layout in [("column_major", column_major), *wrong.items()]:
        torch.manual_seed(0)
        lin = RowParallelLinear(64, 32)
        torch.nn.init.normal_(lin.weight)
        x, w = torch.randn(3, 64), lin.weight.detach().clone()
        y = lin(x)
        try:
            layout(lin)
            ok = _layout_ok(lin, w, x, y)
        except RuntimeError:  # the transposed copy cannot even multiply x
            ok = False
        assert ok == (name == "column_major"), name


def test_host_threads_must_be_positive():
    from minisgl_edu.config import EngineConfig
    with pytest.raises(ValueError, match="host_threads must be >= 1"):
        EngineConfig(model_path="x", device="cpu", host_threads=0)


def test_host_threads_for_every_process_kind(monkeypatch):
    """The one rule (config.host_threads_for) that Engine.__init__ and each scheduler rank apply: explicit wins;
    CUDA takes 4 (fewer cores: all); a CPU rank takes its share of the cores (its OpenMP threads wait passively:
    the launcher's child_env); an offline CPU engine None."""
    import os

    from minisgl_edu.config import SchedulerConfig, host_threads_for
    cfg = lambda **kw: SchedulerConfig(model_path="x", device="cpu", **kw)
    for cores, tp, cuda, cpu_rank in ((16, 1, 4, 16), (16, 2, 4, 8), (2, 1, 2, 2), (2, 2, 2, 1)):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        for rank_process in (False, True):
            assert host_threads_for(cfg(tp=tp), "cuda", rank_process) == cuda
            assert host_threads_for(cfg(tp=tp, host_threads=3), "cuda", rank_process) == 3
            assert host_threads_for(cfg(tp=tp, host_threads=3), "cpu", rank_process) == 3
        assert host_threads_for(cfg(tp=tp), "cpu", rank_process=True) == cpu_rank
        assert host_threads_for(cfg(tp=tp), "cpu") is None  # the whole machine is the offline engine's
    from minisgl_edu.config import EngineConfig
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert host_threads_for(EngineConfig(model_path="x", device="cpu"), "cpu", rank_process=True) == 2  # no tp field: one rank


def test_child_env_sets_only_what_is_unset_and_restores(monkeypatch):
    """The launcher starts CPU ranks with an OpenMP spin in their environment (rank_env): libgomp's long default when
    their cores are quiet at launch, the short one when busy or unknown; unless the user chose a wait policy or a spin
    count. child_env sets only what is unset, and restores."""
    import os

    from minisgl_edu.server.launcher import LONG_SPIN, SHORT_SPIN, child_env, rank_env
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert rank_env("cpu", probe=lambda: 0.1) == {"GOMP_SPINCOUNT": LONG_SPIN}  # quiet
    assert rank_env("cpu", probe=lambda: 1.9) == {"GOMP_SPINCOUNT": SHORT_SPIN}  # two busy loops beside it
    assert rank_env("cpu", probe=lambda: None) == {"GOMP_SPINCOUNT": SHORT_SPIN}  # no /proc/stat: the safe one
    assert rank_env("cuda", probe=lambda: 1 / 0) == {}  # a GPU rank is not probed
    with child_env(**rank_env("cpu", probe=lambda: 2.0)):
        assert os.environ["GOMP_SPINCOUNT"] == SHORT_SPIN
    assert "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    assert rank_env("cpu", probe=lambda: 1 / 0) == {}  # the user's count wins, unprobed
    with child_env(**rank_env("cpu")):
        assert os.environ["GOMP_SPINCOUNT"] == "5"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # a policy chosen (this suite's conftest): no spin count added
    assert rank_env("cpu") == {}
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with child_env(OMP_WAIT_POLICY="PASSIVE"):
        assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    with child_env(OMP_WAIT_POLICY="PASSIVE"):
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # the user's choice wins
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


STAT_BEFORE = """cpu  3100 0 300 5000 100 0 0 0 0 0
cpu0 3000 0 200 1000 50 0 0 0 0 0
cpu1 100 0 100 4000 50 0 0 0 0 0
intr 12345
"""
STAT_AFTER = """cpu  3180 0 320 5090 110 0 0 0 0 0
cpu0 3000 0 200 1090 60 0 0 0 0 0
cpu1 180 0 120 4000 50 0 0 0 0 0
intr 12399
"""  # 0.2 s at 100 Hz later: core 0 idle (90 idle + 10 iowait of 100), core 1 busy (80 user + 20 system)


def busy_since_boot(before, after, cores):  # wrong: reads the totals since boot, not what the cores do now
    return sum(1 - after[c][0] / after[c][1] for c in cores)


def busy_all_cores(before, after, cores):  # wrong: counts every core, not the rank's own
    from minisgl_edu.server.launcher import busy_between
    return busy_between(before, after, after.keys())


def test_cores_busy_reads_the_change_in_proc_stat():
    """What the launcher's spin choice rests on: /proc/stat's per-core lines, differenced. Core 1 turned busy after a
    long idle life and core 0 idle after a busy one; the wrong readings kept here get that (or the cores) wrong."""
    from minisgl_edu.server.launcher import BUSY_CORES, busy_between, core_times
    before, after = core_times(STAT_BEFORE), core_times(STAT_AFTER)
    assert before == {0: (1050, 1050 + 3200), 1: (4050, 4050 + 200)}  # (idle incl. iowait, all); the "cpu" total left out
    assert busy_between(before, after, {0, 1}) == pytest.approx(1.0)
    assert busy_between(before, after, {1}) == pytest.approx(1.0)
    assert busy_between(before, after, {0}) == pytest.approx(0.0)  # a rank pinned to core 0 spins long
    assert busy_between(before, before, {0, 1}) == 0.0  # no time passed: nothing known to be busy
    for wrong in (busy_since_boot, busy_all_cores):  # both would make the rank on core 0 spin short
        assert wrong(before, after, {0}) >= BUSY_CORES


def test_cores_busy_sees_a_busy_loop():
    """The probe itself on this machine: a process spinning on a core reads as (at least most of) a busy core."""
    import subprocess
    import sys

    from minisgl_edu.server.launcher import BUSY_CORES, cores_busy
    loop = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 5: pass"])
    try:
        time.sleep(0.3)  # past its interpreter's start
        busy = cores_busy(0.3)
    finally:
        loop.kill()
        loop.wait()
    assert busy is not None and busy >= BUSY_CORES


def test_host_threads_is_applied_by_the_engine(tiny):
    """`host_threads` (config chain) sets torch's CPU threads where the engine is built; None leaves the CPU alone."""
    before = torch.get_num_threads()
    try:
        tiny_llm(tiny, host_threads=1)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        tiny_llm(tiny)  # None on the CPU: untouched
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_every_gemv_entry_point_names_the_gemv_cubin(monkeypatch):
    """Every kind of gemv.cu's entry points (read from gemv.cu itself), at every configuration built, resolves to
    gemv.cubin (the GPU loads them by name; one missing fails every model forward there). The bug this caught,
    a kind missing from the names cubin_path knows, is kept below and shown caught."""
    import re
    from pathlib import Path

    from minisgl_edu.model import qk_kernel
    src = (Path(qk_kernel.__file__).parent / "gemv.cu").read_text()
    built = {(int(t), int(r)) for t, r in re.findall(r"^GEMV_JS\((\d+), (\d+)\)", src.replace(" GEMV_JS", "\nGEMV_JS"), re.M)}
    assert built == set(qk_kernel.GEMV_BUILT)
    kinds = set(re.findall(r"\b(\w*)gemv_t##T##_r##R##_j##J\(", src))
    assert kinds == set(qk_kernel.GEMV_KINDS)

    def names():
        return [qk_kernel.gemv_name(kind, k, t, r) for kind in kinds for t, r in qk_kernel.GEMV_BUILT for k in (576, 1024, 3072)]
    assert all(n is not None and qk_kernel.cubin_path(n).name == "gemv.cubin" for n in names())
    assert qk_kernel.gemv_name("", 1024, 64, 1) is None  # a configuration gemv.cu does not build
    monkeypatch.setattr(qk_kernel, "GEMV_KINDS", ("", "silu_"))  # the bug: norm_gemv unknown to cubin_path
    with pytest.raises(KeyError):
        [qk_kernel.cubin_path(n) for n in names()]


def test_one_row_dispatch_on_the_cpu(monkeypatch):
    """Which product of a decoder layer takes our GEMV, with what kind and configuration, run on the CPU with
    a stand-in for the kernel (the same maths in float32): one row under the switch does, two rows, the switch
    off, and o_proj (GEMV_CONFIG["row"] None) do not; the results equal the plain layers'. A dispatch that drops
    the residual (kept below) is caught."""
    from types import SimpleNamespace

    import torch.nn.functional as F

    from minisgl_edu.model import layers, qk_kernel
    calls = []
    silu_mul = lambda gu: F.silu(gu[:, : gu.shape[1] // 2]) * gu[:, gu.shape[1] // 2:]

    def fake_gemv(x, w, silu=False, config=None, residual=None, norm_weight=None, eps=0.0, pdl=False):
        calls.append(("silu" if silu else "norm" if residual is not None else "plain", config, pdl))
        if silu:
            return F.linear(silu_mul(x), w)
        if residual is None:
            return F.linear(x, w)
        a = x + residual
        return F.linear(a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + eps) * norm_weight, w), a

    monkeypatch.setattr(qk_kernel, "gemv", fake_gemv)
    def fused_add_rmsnorm(x, residual, weight, eps):  # FlashInfer's, in place, in float32
        residual += x
        x.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + eps) * weight)

    fi = SimpleNamespace(norm=SimpleNamespace(fused_add_rmsnorm=fused_add_rmsnorm),
                         activation=SimpleNamespace(silu_and_mul=silu_mul))
    monkeypatch.setattr(layers, "fused_kernels", lambda x: fi)  # as on CUDA: the fused kernels' maths
    monkeypatch.setattr(layers.KERNELS, "gemv", True)
    g = torch.Generator().manual_seed(0)
    norm = layers.RMSNorm(16, 1e-6)
    norm.weight.data = 1 + 0.3 * torch.randn(16, generator=g)
    col, row = layers.ColumnParallelLinear.simple(16, 24), layers.RowParallelLinear(24, 16)
    for p in (col.weight, row.weight):
        p.data = torch.randn(p.shape, generator=g)
    for rows in (1, 2):
        x, res, gu = (torch.randn(rows, n, generator=g) for n in (16, 16, 48))
        calls.clear()
        y, new_res = layers.norm_linear(x.clone(), res.clone(), norm, col)  # the fused norm works in place
        h, want_res = norm._plain(x + res), x + res
        torch.testing.assert_close(y, F.linear(h, col.weight)), torch.testing.assert_close(new_res, want_res)
        torch.testing.assert_close(layers.silu_mul_down(gu, row), F.linear(silu_mul(gu), row.weight))
        torch.testing.assert_close(row(torch.randn(rows, 24, generator=g)).shape, torch.Size([rows, 16]))
        cfg = qk_kernel.GEMV_CONFIG
        assert calls == ([("norm", cfg["column"], True), ("silu", cfg["silu"], True)] if rows == 1 else []), calls
    calls.clear()
    monkeypatch.setattr(layers.KERNELS, "pdl", False)  # the launch's twin: the same kernels, launched plainly
    layers.norm_linear(x[:1], res[:1].clone(), norm, col), layers.silu_mul_down(gu[:1], row)
    assert calls == [("norm", cfg["column"], False), ("silu", cfg["silu"], False)], calls
    calls.clear()
    monkeypatch.setattr(layers.KERNELS, "gemv", False)  # the naive twin: cuBLAS (here F.linear) for one row too
    layers.norm_linear(x[:1], res[:1].clone(), norm, col), layers.silu_mul_down(gu[:1], row)
    assert calls == []
    monkeypatch.setattr(layers.KERNELS, "gemv", True)
    dropped = lambda x, w, kind, residual=None, norm=None: qk_kernel.gemv(x, w, kind == "silu", qk_kernel.GEMV_CONFIG[kind])
    monkeypatch.setattr(layers, "one_row", dropped)  # the residual and norm not handed on
    with pytest.raises(Exception):
        y, new_res = layers.norm_linear(x[:1], res[:1].clone(), norm, col)
        torch.testing.assert_close(new_res, x[:1] + res[:1])


def test_programmatic_dependent_launch_on_the_cpu(monkeypatch):
    """qk_kernel._launch with pdl=True hands the driver's cuLaunchKernelEx one launch attribute, programmatic stream
    serialization, with the grid, block, shared bytes and stream of the plain cuLaunchKernel it replaces; pdl=False
    keeps cuLaunchKernel. The ctypes structs have cuda.h's layout (CUlaunchAttribute 72 bytes, its value at 8;
    CUlaunchConfig 56, hStream at 32): a driver reading a shifted struct would launch a different grid."""
    import ctypes
    from types import SimpleNamespace

    from minisgl_edu.model import qk_kernel as kk
    assert ctypes.sizeof(kk.LaunchAttribute) == 72 and kk.LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(kk.LaunchConfig) == 56 and (kk.LaunchConfig.stream.offset, kk.LaunchConfig.attrs.offset,
                                                      kk.LaunchConfig.num_attrs.offset) == (32, 40, 48)
    seen = []

    class Driver:
        def cuLaunchKernel(self, fn, bx, by, bz, tx, ty, tz, shared, stream, params, extra):
            seen.append(("plain", (bx, by, bz), (tx, ty, tz), shared, stream.value))
            return 0

        def cuLaunchKernelEx(self, config_ref, fn, params, extra):
            c = ctypes.cast(config_ref, ctypes.POINTER(kk.LaunchConfig)).contents
            attrs = [(c.attrs[i].id, c.attrs[i].value) for i in range(c.num_attrs)]
            seen.append(("pdl", tuple(c.grid), tuple(c.block), c.shared, c.stream, attrs))
            return 0

    monkeypatch.setattr(kk, "_kernel", lambda device, name: (Driver(), ctypes.c_void_p(1)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=0x5000))
    args = [ctypes.c_int(3)]
    kk._launch("gemv_t128_r4_j1", torch.device("cpu"), 1024, 128, args)
    kk._launch("gemv_t128_r4_j1", torch.device("cpu"), (7, 2), 256, args, shared=64, pdl=True)
    assert seen == [("plain", (1024, 1, 1), (128, 1, 1), 0, 0x5000),
                    ("pdl", (7, 2, 1), (256, 1, 1), 64, 0x5000, [(kk.LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)])]
    assert kk.LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == 6  # cuda.h: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def test_large_shared_memory_opt_in_on_the_cpu(monkeypatch):
    """A launch asking for more than 48 KB of dynamic shared memory (the probes' shapes) first raises the kernel's
    limit to that (cuFuncSetAttribute, MAX_DYNAMIC_SHARED_SIZE_BYTES = 8), once per (device, kernel); at 48 KB or less
    it asks nothing. Without it the driver refuses the launch."""
    import ctypes
    from types import SimpleNamespace

    from minisgl_edu.model import qk_kernel as kk
    asked = []

    class Driver:
        def cuFuncSetAttribute(self, fn, attr, value):
            asked.append((fn.value, attr, value))
            return 0

        def cuLaunchKernel(self, *a):
            return 0

    monkeypatch.setattr(kk, "_kernel", lambda device, name: (Driver(), ctypes.c_void_p(len(name))))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=0x5000))
    cpu, args = torch.device("cpu"), [ctypes.c_int(3)]

    def check():
        asked.clear()
        monkeypatch.setattr(kk, "_OPTED_IN", set())
        for name, shared in (("pipe_a", 100_000), ("pipe_a", 100_000), ("pipe_bb", 48 * 1024), ("pipe_ccc", 60_000)):
            kk._launch(name, cpu, 1, 128, args, shared=shared)
        assert asked == [(6, 8, 100_000), (8, 8, 60_000)]
    check()

    class AsksEveryTime(kk._Launch):  # a wrong launcher, kept: forgets it asked (a driver call on every launch)
        def __init__(self, *a, **k):
            kk._OPTED_IN.clear()
            super().__init__(*a, **k)
    monkeypatch.setattr(kk, "_Launch", AsksEveryTime)
    with pytest.raises(AssertionError):
        check()


def balanced_step_with_padding(seq_lens, size, kv_bytes_per_token):
    """The wrong rule, kept: the graph's padding lanes (length 1) counted in the mean."""
    from minisgl_edu.attention import flashinfer as fi
    return fi.balanced_step(seq_lens, len(seq_lens), kv_bytes_per_token)


@pytest.mark.parametrize("rule", ["real", "padding counted"])
def test_balanced_decode_is_chosen_for_many_uneven_long_contexts_only(rule):
    """Chapter 7: the tensor-core decode kernel for a step of >= 64 requests whose longest context is >= 1.3 x the mean
    and whose KV read is long enough to hide its plan; the padding lanes of a graph never count."""
    from minisgl_edu.attention import flashinfer as fi
    choose = fi.balanced_step if rule == "real" else balanced_step_with_padding
    qwen3 = 2 * 28 * 8 * 128 * 2  # K and V bytes per token, all layers
    pad = lambda lens, to: np.array(list(lens) + [1] * (to - len(lens)), np.int32)  # padding lanes: one key each
    nearly_even = pad([1000] * 55 + [1200] * 10, 80)  # 65 requests padded to a graph of 80: longest / mean 1.16
    cases = [(nearly_even, 65, False),  # the CUDA-core kernel (with the 15 padding lanes counted it looks uneven)
             (pad([400] * 40 + [1500] * 30, 80), 70, True),  # uneven, 70 requests, 6.6 GB of KV
             (pad([400] * 40 + [1500] * 20, 64), 60, False),  # uneven but under 64 requests
             (pad([40] * 60 + [150] * 20, 80), 80, False)]  # uneven, many, but 0.2 GB of KV: the plan would show
    got = [choose(lens, n, qwen3) for lens, n, _ in cases]
    want = [w for _, _, w in cases]
    if rule == "real":
        assert got == want
    else:  # the mutant declares the padded batch uneven: its mean falls to 838 with the 15 one-key lanes
        assert got != want and got[0] is True


# FlashInfer 0.5's plan info of the CUDA-core decode kernel, as the H100 gave it for Qwen3-0.6B (session 29's
# benchmarks/lt_probe.py --attn): [padded_batch_size, ..., enable_cuda_graph, split_kv]
SPLIT_GRAPH_PLAN = [148, 0, 1212416, 0, 592, 1184, 1792, 1780, 1, 1]  # a graph of 128 requests: keys split, one wave
WHOLE_GRAPH_PLAN = [160, 0, 0, 0, 640, 1280, 0, 1924, 1, 0]  # a graph of 160: no split, its own size
EAGER_PLAN = [64, 0, 0, 0, 256, 512, 0, 772, 0, 0]  # no graph


def wave_of_any_plan(plan_info) -> int:
    """The wrong reading, kept: the padded size of every graph plan, split or not (a whole-KV plan's is its size)."""
    info = [int(v) for v in plan_info]
    return info[0] if info[8] else 0


@pytest.mark.parametrize("reader", ["split plans only", "any graph plan"])
def test_one_wave_is_read_from_split_graph_plans_only(reader):
    """Chapter 7: a CUDA-graph plan that splits keys pads its grid to one wave of the CUDA-core kernel, so its padded
    size is the requests one wave holds; a plan that does not split (or no graph) says nothing about it. The backend
    keeps the largest answer over its graphs' plans, so a reader that took every plan's size would learn the largest
    graph's size instead."""
    from minisgl_edu.attention import flashinfer as fi
    read = fi.wave_of if reader == "split plans only" else wave_of_any_plan
    learnt = max(read(p) for p in (SPLIT_GRAPH_PLAN, WHOLE_GRAPH_PLAN, EAGER_PLAN))
    if reader == "split plans only":
        assert [fi.wave_of(p) for p in (SPLIT_GRAPH_PLAN, WHOLE_GRAPH_PLAN, EAGER_PLAN)] == [148, 0, 0]
        assert learnt == 148
    else:
        assert learnt == 160  # caught: 160 would put the 160-request step inside "one wave"


# FlashInfer 0.5's PrefillPlanInfo as a CUDA-graph plan lays it out (the numbers here made up): [padded_batch_size,
# total_num_rows, its offset, cta_tile_q, request_indices_offset, qo_tile_indices_offset, ..., enable_cuda_graph,
# split_kv]
PREFILL_GRAPH_PLAN = [22, 512, 0, 64, 1024, 1152, 1280, 0, 0, 0, 0, 0, 0, 1, 0]


def pooled_real_blocks(grid, lens, group) -> int:
    """The wrong count, kept: the lanes' rows pooled into tiles, as if a tile could hold rows of two lanes."""
    return -(-sum(lens) * group // grid.tile_rows)


def requests_at_tile_offset(grid, ws) -> torch.Tensor:
    """The wrong reader, kept: the request indices read at the query-tile indices' offset (the next field)."""
    return ws[grid.tile_off:grid.tile_off + 4 * grid.blocks].view(torch.int32)


@pytest.mark.parametrize("count", ["per lane", "pooled"])
def test_a_prefill_grid_counts_one_tile_at_least_for_every_lane(count):
    """Chapter 7: a prefill graph's grid has a block per query tile it could need; the tiles of its lanes are the real
    blocks, the rest spare (the GPU test reads which request each one reads). A tile never crosses lanes: three
    one-row lanes take three tiles, so the count that pools rows undercounts and calls real blocks spare."""
    from minisgl_edu.attention import flashinfer as fi
    grid = fi.prefill_grid(PREFILL_GRAPH_PLAN)
    assert (grid.blocks, grid.tile_rows, grid.request_off, grid.tile_off) == (22, 64, 1024, 1152)
    assert not grid.split and fi.prefill_grid(PREFILL_GRAPH_PLAN[:14] + [1]).split  # split_kv, the last entry
    ws = torch.zeros(2048, dtype=torch.uint8)  # an int workspace: each block's request, then its tile, as int32
    ws[1024:1024 + 88].view(torch.int32).copy_(torch.arange(22, dtype=torch.int32))
    ws[1152:1152 + 88].view(torch.int32).fill_(7)
    assert grid.requests(ws).tolist() == list(range(22)) and grid.tiles(ws).tolist() == [7] * 22
    assert requests_at_tile_offset(grid, ws).tolist() == [7] * 22  # caught: every block would read request 7
    lens, group = [1, 1, 1, 509], 2  # three one-row lanes, the slack lane the rest; 2 query heads a KV head
    real = grid.real_blocks(lens, group) if count == "per lane" else pooled_real_blocks(grid, lens, group)
    if count == "per lane":
        assert real == 3 + 16  # one tile each for the short lanes, ceil(1018 / 64) for the slack lane
    else:
        assert real == 16  # caught: three real blocks counted as spare


def test_steps_just_past_one_wave_take_the_balanced_kernel_however_even():
    """Chapter 7: with one wave of 148 requests, even steps of 149 up to 1.45 waves (214) go through the balanced
    kernel (on the H100: 160 even requests 290 -> 241 us a layer); one wave or less, or 1.5 waves and more, stay on
    the CUDA-core kernel unless uneven; without a learnt wave (eager, or WAVE_BALANCED off) only unevenness counts."""
    from minisgl_edu.attention import flashinfer as fi
    qwen3 = 2 * 28 * 8 * 128 * 2
    even = lambda n: np.full(n, 1024, np.int32)
    wave = 148
    assert [fi.balanced_step(even(n), n, qwen3, wave) for n in (128, 148, 149, 160, 192, 214, 215, 224, 256)] == \
        [False, False, True, True, True, True, False, False, False]
    assert not fi.balanced_step(even(160), 160, qwen3, 0)  # nothing learnt: the rule of unevenness alone
    uneven = np.array([400] * 100 + [2000] * 28, np.int32)  # 128 requests, longest / mean 2.6: balanced either way
    assert fi.balanced_step(uneven, 128, qwen3, 0) and fi.balanced_step(uneven, 128, qwen3, wave)
    short = np.full(160, 100, np.int32)  # past one wave but 1.8 GB of KV: the balanced plan's host time would show
    assert not fi.balanced_step(short, 160, qwen3, wave)


def test_few_rows_dispatch_on_the_cpu(monkeypatch):
    """Which products take our tensor-core GEMM for 2-16 rows (qk_kernel.skinny), run on the CPU with a stand-in
    for the kernel: q|k|v (after its norm), gate|up and down do at 2 and 16 rows; one row (the GEMV's), 17 rows,
    the switch off and PDL off do not; the results equal the plain layers'. A stand-in that drops a row is caught."""
    from types import SimpleNamespace

    import torch.nn.functional as F

    from minisgl_edu.model import layers, qk_kernel
    calls = []

    def fake_skinny(x, w, pdl=True):
        calls.append((x.shape[0], w.shape[0], pdl))
        return F.linear(x, w)

    monkeypatch.setattr(qk_kernel, "skinny", fake_skinny)
    monkeypatch.setattr(qk_kernel, "gemv", lambda *a, **k: None)  # one row: the GEMV declines here, cuBLAS serves
    silu_mul = lambda gu: F.silu(gu[:, : gu.shape[1] // 2]) * gu[:, gu.shape[1] // 2:]

    def fused_add_rmsnorm(x, residual, weight, eps):
        residual += x
        x.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + eps) * weight)

    fi = SimpleNamespace(norm=SimpleNamespace(fused_add_rmsnorm=fused_add_rmsnorm),
                         activation=SimpleNamespace(silu_and_mul=silu_mul))
    monkeypatch.setattr(layers, "fused_kernels", lambda x: fi)
    for name, value in (("skinny", True), ("pdl", True), ("gemv", True)):
        monkeypatch.setattr(layers.KERNELS, name, value)
    g = torch.Generator().manual_seed(1)
    norm = layers.RMSNorm(16, 1e-6)
    norm.weight.data = 1 + 0.3 * torch.randn(16, generator=g)  # made with torch.empty: garbage (at times NaN) until set
    col, row = layers.ColumnParallelLinear.simple(16, 48), layers.RowParallelLinear(24, 16)
    for p in (col.weight, row.weight):
        p.data = torch.randn(p.shape, generator=g)

    def layer(rows):
        x, res, gu = (torch.randn(rows, n, generator=g) for n in (16, 16, 48))
        calls.clear()
        y, _ = layers.norm_linear(x.clone(), res.clone(), norm, col)
        torch.testing.assert_close(y, F.linear(norm._plain(x + res), col.weight))
        torch.testing.assert_close(layers.silu_mul_down(gu, row), F.linear(silu_mul(gu), row.weight))
        return list(calls)

    for rows in (2, 16):
        assert layer(rows) == [(rows, 48, True), (rows, 16, True)]
    assert layer(1) == [] and layer(17) == []
    monkeypatch.setattr(layers.KERNELS, "pdl", False)  # launched plainly it loses to cuBLAS: not taken at all
    assert layer(4) == []
    monkeypatch.setattr(layers.KERNELS, "pdl", True)
    monkeypatch.setattr(layers.KERNELS, "skinny", False)  # the naive twin: cuBLAS
    assert layer(4) == []
    monkeypatch.setattr(layers.KERNELS, "skinny", True)
    monkeypatch.setattr(qk_kernel, "skinny", lambda x, w, pdl=True: F.linear(x[:1], w).expand(x.shape[0], -1))
    with pytest.raises(AssertionError):  # a kernel that computes one row and copies it
        layer(4)


def test_skinny_shapes_and_entry_points():
    """The K slice chosen for each product (the H100's best at 16 rows for Qwen3-0.6B's: q|k|v and gate|up one slice
    of 1,024, o_proj 16 chunks, down 32), none where the features or K do not tile, and every entry point the
    library names is instantiated in skinny_gemm.cu (the GPU loads them by name)."""
    import re
    from pathlib import Path

    from minisgl_edu.model import qk_kernel as kk
    assert [kk.skinny_j(n, k) for n, k in ((4096, 1024), (6144, 1024), (1024, 2048), (1024, 3072))] == [32, 32, 16, 32]
    assert kk.skinny_j(576, 1536) == 8 and kk.skinny_j(960, 576) is None and kk.skinny_j(1000, 1024) is None
    built = skinny_entry_points()
    named = {kk.skinny_name(1, 1, kk.skinny_j(n, k), kk.SKINNY_WARPS, *kk.SKINNY_GA)
             for n, k in ((4096, 1024), (6144, 1024), (1024, 2048), (1024, 3072), (576, 1536))}
    assert named <= built
    assert all(re.fullmatch(r"skinny_m1_n1_j(8|16|32)_w8(_g[14]_a[124])?", n) for n in named)
    assert {kk.cubin_path(n).name for n in named} == {"skinny_gemm.cubin"}  # the loader finds each in its file


def skinny_entry_points() -> set[str]:
    """The kernels skinny_gemm.cu defines: its entry-point macros expanded by the C preprocessor (the CUDA headers
    are not needed for that), the names read from the result."""
    import re
    import shutil
    import subprocess
    from pathlib import Path

    from minisgl_edu.model import qk_kernel as kk
    src = (Path(kk.__file__).parent / "skinny_gemm.cu").read_text()
    macros = src[src.index("#ifndef SKINNY_NO_ENTRIES"):]  # the macros and their uses, after the templates
    assert shutil.which("cpp"), "the C preprocessor (cpp) is needed to list skinny_gemm.cu's entry points"
    out = subprocess.run(["cpp", "-P"], input=macros, capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"__launch_bounds__\(32 \* \d+\) (\w+)\(", out))


def test_skinny_probe_names_are_built():
    """Every shape the probe times (benchmarks/lt_probe.py --skinny, kinds n and p, at the sizes its calls use) and
    every variant the model can be pointed at (profile_decode.py --skinny-ga) is a kernel skinny_gemm.cu defines: a
    name missing there would end a device call at its first launch. Kept wrong: a (groups, accumulators) pair and a
    row-tile count that were never built are caught."""
    import sys
    from pathlib import Path

    from minisgl_edu.model import qk_kernel as kk
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import lt_probe
    built = skinny_entry_points()
    assert len(built) == 115

    def names(configs, m):
        return {kk.skinny_name(lt_probe.skinny_tiles(m), nt, j, w, g, a) for nt, j, w, g, a in configs}
    for m in (2, 8, 16, 32, 48, 64, 96, 128):
        for n, k in lt_probe.SHAPES.values():
            assert names(lt_probe.skinny_configs(n, k, m, "n,p"), m) <= built, (m, n, k)
    model = {kk.skinny_name(1, 1, j, kk.SKINNY_WARPS, g, a) for j in (8, 16, 32) for g, a in kk.SKINNY_GA_BUILT}
    assert model <= built
    # the loader's file for each (session 36's call 4 died on a KeyError: only the 1, 1 names were mapped)
    assert {kk.cubin_path(n).name for n in model} == {"skinny_gemm.cubin"}
    assert kk.skinny_name(1, 1, 8, 8, 2, 2) not in built  # a pair never built
    assert kk.skinny_name(3, 1, 8, 8) not in built  # 48 rows take MT = 4 (skinny_tiles), never 3
    assert not names([(1, 8, 8, 2, 2)], 16) <= built


def test_pipe_probe_names_are_built():
    """Every configuration benchmarks/lt_probe.py --pipe times (at the rows its calls use) is a kernel
    benchmarks/kernels/pipe_gemm.cu defines, fits in an SM's shared memory and tiles its product. Kept wrong: a warp
    layout that does not divide the row tiles and a stage count never built are caught."""
    import re
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    import lt_probe
    src = (root / "benchmarks" / "kernels" / "pipe_gemm.cu").read_text()
    assert shutil.which("cpp"), "the C preprocessor (cpp) is needed to list pipe_gemm.cu's entry points"
    out = subprocess.run(["cpp", "-P"], input=src[src.index("#define PIPE("):], capture_output=True, text=True,
                         check=True).stdout
    built = set(re.findall(r"__launch_bounds__\(32 \* \d+ \* \d+\) (\w+)\(", out))
    assert len(built) == 58
    for m in (16, 17, 32, 33, 64, 96, 128, 192, 256):
        for n, k in lt_probe.SHAPES.values():
            configs = lt_probe.pipe_configs(n, k, m)
            assert configs and {lt_probe.pipe_name(*c[:5], c[6]) for c in configs} <= built, (m, n, k)
            for mt, wm, wn, ntw, st, s, pf in configs:
                assert m <= 16 * mt and n % (8 * ntw * wn) == 0 and k % (s * lt_probe.PIPE_BK) == 0
                assert st * (8 * ntw * wn + 16 * mt) * (lt_probe.PIPE_BK + 8) * 2 <= 227 * 1024
    assert lt_probe.pipe_name(2, 4, 1, 4, 4, 0) not in built  # 4 warps down the rows of a 2-tile block: never built
    assert "pipe_m4_w2x2_n2_s3_p0" not in built  # 3 stages: never built


def test_cutlass_libraries_on_the_cpu(monkeypatch, tmp_path):
    """benchmarks/lt_probe.py's Cutlass reads both host libraries of cutlass_swap_ab.cu (as is, and the _pf build
    whose variants prefetch their weights before the PDL wait), each variant under its own name, and a configuration
    (its index in `names`) launches that library's variant, with its workspace sized by that library. A library that
    was not built is left out. Stand-in libraries replace ctypes.CDLL. Kept wrong: routing by the variant number
    alone (session 38's class, one library) sends the _pf configurations to the plain library."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import lt_probe
    from minisgl_edu.model import qk_kernel
    monkeypatch.setattr(qk_kernel, "cubin_path", lambda name: tmp_path / f"{name}.cubin")
    launched = []

    def library(path):
        tag = "_pf" if path.endswith("_pf.so") else ""
        names = [b"a" + tag.encode(), b"b" + tag.encode()]
        return SimpleNamespace(  # plain functions: the class sets restype and argtypes on them
            swap_ab_count=lambda: len(names), swap_ab_name=lambda v: names[v],
            swap_ab_can=lambda v, m, n, k: 0 if (v, tag) != (1, "") else 1,  # the plain b does not fit
            swap_ab_workspace=lambda v, m, n, k: (v + 2) << 20 if tag else 0,  # stream-K's, say: _pf only
            swap_ab=lambda v, w, x, y, m, n, k, ws, ws_bytes, stream, pdl: launched.append((tag, v, ws_bytes)) or 0)
    monkeypatch.setattr(lt_probe.ctypes, "CDLL", library)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: SimpleNamespace(cuda_stream=0))
    (tmp_path / "cutlass_swap_ab.so").touch()
    assert lt_probe.Cutlass(torch.device("cpu")).names == ["a", "b"]  # the _pf library not built: left out
    (tmp_path / "cutlass_swap_ab_pf.so").touch()

    def routed(cu):
        x, w, out = torch.zeros(32, 64), torch.zeros(128, 64), torch.zeros(32, 128)
        launched.clear()
        for c in cu.configs(128, 64, 32):
            cu.mm(x, w, out, c)
        return [(cu.names[c[0]], tag, v) for c, (tag, v, _) in zip(cu.configs(128, 64, 32), launched)]
    cu = lt_probe.Cutlass(torch.device("cpu"))
    assert cu.names == ["a", "b", "a_pf", "b_pf"]
    assert routed(cu) == [("a", "", 0), ("a_pf", "_pf", 0), ("b_pf", "_pf", 1)]
    assert cu.ws.numel() == 3 << 20  # the largest the launches needed: b_pf's
    cu.ws = None
    cu.reserve([((0,), 32, 128, 64), ((2,), 32, 128, 64)])
    assert cu.ws.numel() == 2 << 20  # a_pf's, asked of the _pf library

    class ByVariantNumber(lt_probe.Cutlass):  # session 38's routing: one library, config = its variant number
        def mm(self, x, w_, out, c, pdl=True):
            lib, _ = self.entries[0]
            lib.swap_ab(c[0], 0, 0, 0, x.shape[0], w_.shape[0], x.shape[1], 0, 0, 0, int(pdl))
    assert routed(ByVariantNumber(torch.device("cpu"))) != routed(cu)


def test_skinny_launch_geometry_on_the_cpu(monkeypatch):
    """qk_kernel.skinny_launch's grid, block and shared bytes for the model's shape (64 features a block, one K slice
    of 32 J a grid row) and a probe's (NT feature groups a warp, MT row tiles), handed to the launcher; the kernel's
    own index arithmetic (skinny_gemm.cu) assumes exactly these."""
    from minisgl_edu.model import qk_kernel as kk
    seen = []
    monkeypatch.setattr(kk, "_launch", lambda name, dev, blocks, threads, args, shared=0, pdl=False:
                        seen.append((name, blocks, threads, shared, pdl, [a.value for a in args[1:5:2]])))
    x, w = torch.zeros(4, 3072, dtype=torch.bfloat16), torch.zeros(1024, 3072, dtype=torch.bfloat16)
    out = torch.zeros(4, 1024, dtype=torch.bfloat16)
    kk.skinny_launch(x, w, out, out, out, kk.skinny_j(1024, 3072))
    kk.skinny_launch(x, w, out, out, out, 8, warps=4, mt=2, nt=2, pdl=False)
    assert seen == [("skinny_m1_n1_j32_w8", (16, 3), 256, 16 * 1056 * 2, True, [4, 1024]),
                    ("skinny_m2_n2_j8_w4", (16, 12), 128, 32 * 288 * 2, False, [4, 1024])]


def check_skinny_plan(plan_cls, monkeypatch) -> None:
    """A skinny plan (qk_kernel._SkinnyPlan, made once a (device, stream, n, k)) hands the launcher skinny_geometry's
    grid, block and shared bytes, and each call the kernel's arguments in skinny_gemm.cu's order: x, m, w, n, k, out,
    the workspace, the tickets; a second call with other tensors launches with their pointers, not the first's."""
    from minisgl_edu.model import qk_kernel as kk
    launched = []

    class Recorder:
        def __init__(self, name, device, blocks, threads, shared=0, pdl=False, stream=None):
            self.made = (name, blocks, threads, shared, pdl, stream)

        def __call__(self, params):
            launched.append([ctypes.cast(params[i], ctypes.POINTER(t)).contents.value
                             for i, t in enumerate((ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p))])

    monkeypatch.setattr(kk, "_Launch", Recorder)
    ws, tickets = torch.zeros(8), torch.zeros(4, dtype=torch.int32)
    plan = plan_cls(torch.device("cpu"), 77, 1024, 3072, kk.skinny_j(1024, 3072), ws, tickets, True)
    name, blocks, threads, shared = kk.skinny_geometry(1024, 3072, 32, groups=kk.SKINNY_GA[0], accs=kk.SKINNY_GA[1])
    assert plan.launch.made == (name, blocks, threads, shared, True, 77) and plan.slices == blocks[1] == 3
    for m in (4, 2):
        x, w, out = torch.zeros(m, 3072), torch.zeros(1024, 3072), torch.zeros(m, 1024)
        plan(x, m, w, out)
        assert launched[-1] == [x.data_ptr(), m, w.data_ptr(), 1024, 3072, out.data_ptr(), ws.data_ptr(),
                                tickets.data_ptr()]


def test_skinny_plan_arguments_on_the_cpu(monkeypatch):
    from minisgl_edu.model import qk_kernel as kk
    check_skinny_plan(kk._SkinnyPlan, monkeypatch)

    class SwappedNK(kk._SkinnyPlan):  # a wrong plan: n and k in each other's place
        def __init__(self, device, stream, n, k, j, ws, tickets, pdl):
            super().__init__(device, stream, n, k, j, ws, tickets, pdl)
            self.args[3].value, self.args[4].value = k, n

    class FirstPointers(kk._SkinnyPlan):  # a wrong plan: the first call's pointers kept
        def __call__(self, x, m, w, out):
            if self.args[0].value is None:
                super().__call__(x, m, w, out)
            else:
                self.launch(self.params)

    for wrong in (SwappedNK, FirstPointers):
        with pytest.raises(AssertionError):
            check_skinny_plan(wrong, monkeypatch)


def test_product_probes_on_the_cpu(monkeypatch, tmp_path):
    """benchmarks/lt_probe.py's --skinny and --pipe loops, run on the CPU with stand-in kernels (x @ w.T in float) and
    a stand-in timer, so a device call never finds a bug in them: every configuration is checked and timed, a wrong
    one (a row left unwritten) and an unrepeatable one are marked bad and never taken as best even when fastest, the
    layer row names each product's best, and profile_decode.py --pipe reads the probe's JSON and routes a product
    to the best configuration where it beat torch."""
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    import lt_probe
    import profile_decode
    cost = {"now": 100.0}  # the stand-in timer reads what the last launch cost; torch's products cost 100

    def graph_time(fn, layers, iters=20):
        cost["now"] = 100.0
        fn(0)
        return cost["now"]
    monkeypatch.setattr(lt_probe, "graph_time", graph_time)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    WRONG, UNREPEATABLE = "wrong", "unrepeatable"
    calls = {"n": 0}

    def launch(x, w, out, c, pdl, kind):
        calls["n"] += 1
        y = x.float() @ w.float().T
        if kind == WRONG:
            y[-1] = 0  # a stand-in that forgets a row
        if kind == UNREPEATABLE:
            y += 4.0 * pdl  # its PDL launch differs from its plain one
        out.copy_(y.to(out.dtype))
        cost["now"] = 1.0 if kind in (WRONG, UNREPEATABLE) else 50.0 + 0.1 * sum(c)  # the bad ones fastest

    class FakePipe:
        def __init__(self, dev):
            pass

        def available(self):
            return True

        def mm(self, x, w, out, c, pdl=True):
            launch(x, w, out, c, pdl, {(0,) * 7: WRONG, (1,) * 7: UNREPEATABLE}.get(tuple(c)))
    monkeypatch.setattr(lt_probe, "Pipe", FakePipe)
    real = lt_probe.pipe_configs
    monkeypatch.setattr(lt_probe, "pipe_configs", lambda n, k, m: real(n, k, m)[:2] + [(0,) * 7, (1,) * 7])
    rows = lt_probe.pipe_probe([32], layers=2, dev=torch.device("cpu"))
    products = [r for r in rows if r["gemm"] != "layer"]
    assert [r["gemm"] for r in rows] == list(lt_probe.SHAPES) + ["layer"]
    for r in products:
        bad = {tuple(c["cfg"]) for c in r["configs"] if not (c["err"] < 2e-2 and c["repeat_equal"])}
        assert bad == {(0,) * 7, (1,) * 7}
        assert tuple(r["best"]["cfg"]) == min((tuple(c) for c in real(r["n"], r["k"], 32)[:2]), key=sum)
    assert rows[-1]["best"] == {r["gemm"]: lt_probe.cfg_name(tuple(r["best"]["cfg"])) for r in products}
    (tmp_path / "pipe.json").write_text(json.dumps({"pipe": rows}))
    from minisgl_edu.model import layers
    plain_few_rows = layers.few_rows
    monkeypatch.setattr(layers, "few_rows", layers.few_rows)  # install_probe wraps it; put it back afterwards
    profile_decode.install_probe(str(tmp_path / "pipe.json"), "pipe")
    n, k = lt_probe.SHAPES["qkv"]
    x, w = torch.randn(20, k, dtype=torch.bfloat16), torch.randn(n, k, dtype=torch.bfloat16)
    before = calls["n"]
    y = layers.few_rows(x, w)  # 20 rows: the probe's 32-row best, which beat torch (50 against 100)
    assert calls["n"] == before + 1 and torch.allclose(y.float(), (x.float() @ w.float().T), rtol=2e-2, atol=0.5)
    assert layers.few_rows(torch.randn(40, k, dtype=torch.bfloat16), w) is None  # 40 rows: not probed, cuBLAS

    class FakeCutlass(FakePipe):  # --cutlass: variants by index; 2 the wrong one, 3 the unrepeatable one
        names = ["v0", "v1", "wrong", "unrepeatable"]
        reserved: list = []

        def configs(self, n, k, m):
            return [(v,) for v in range(4)]

        def reserve(self, launches):
            FakeCutlass.reserved += list(launches)

        def mm(self, x, w, out, c, pdl=True):
            launch(x, w, out, (c[0] + 1,), pdl, {2: WRONG, 3: UNREPEATABLE}.get(c[0]))
    monkeypatch.setattr(lt_probe, "Cutlass", FakeCutlass)
    monkeypatch.setattr(layers, "few_rows", plain_few_rows)
    rows = lt_probe.cutlass_probe([32], layers=2, dev=torch.device("cpu"))
    for r in (r for r in rows if r["gemm"] != "layer"):
        assert {c["variant"] for c in r["configs"] if not (c["err"] < 2e-2 and c["repeat_equal"])} == {"wrong", "unrepeatable"}
        assert r["best"]["variant"] == "v0"
    assert rows[-1]["best"] == {name: "v0" for name in lt_probe.SHAPES}
    (tmp_path / "cutlass.json").write_text(json.dumps({"cutlass": rows}))
    profile_decode.install_probe(str(tmp_path / "cutlass.json"), "cutlass")
    assert {(m, n, k) for _, m, n, k in FakeCutlass.reserved} >= {(256, *lt_probe.SHAPES[p]) for p in lt_probe.SHAPES}
    before = calls["n"]
    y = layers.few_rows(x, w)  # 20 rows: v0 at 32 rows beat torch (50.1 against 100)
    assert calls["n"] == before + 1 and torch.allclose(y.float(), (x.float() @ w.float().T), rtol=2e-2, atol=0.5)
    with pytest.raises(KeyError):  # a --pipe file given to --cutlass: profile_decode's argparse error names it
        profile_decode.install_probe(str(tmp_path / "pipe.json"), "cutlass")
    monkeypatch.setattr(layers, "few_rows", plain_few_rows)

    class FakeSkinny(FakePipe):
        def mm(self, x, w, out, nt, j, warps, pdl, g=1, a=1):
            launch(x, w, out, (nt, j, warps, g, a), pdl, WRONG if (g, a) == (4, 4) else None)
    monkeypatch.setattr(lt_probe, "Skinny", FakeSkinny)
    rows = lt_probe.skinny_probe([16], layers=2, kinds="n,p", dev=torch.device("cpu"))
    for r in (r for r in rows if r["gemm"] != "layer"):
        assert {(c["g"], c["a"]) for c in r["configs"] if c["err"] >= 2e-2} == {(4, 4)}
        assert (r["best"]["g"], r["best"]["a"]) != (4, 4) and "us" in r["best"] and "us_pdl" in r["best"]


class _Cycle:
    """Garbage only the cycle collector frees (it refers to itself), as an engine's CUDA graphs can be."""

    def __init__(self, freed: list[str], name: str) -> None:
        self.me, self.freed, self.name = self, freed, name

    def __del__(self) -> None:
        self.freed.append(self.name)


def _capture_record(monkeypatch) -> tuple[list[tuple[bool, list[str]]], list[str]]:
    """Builds a GraphRunner on the CPU (its CUDA calls stood in for) over an engine of 2 decode sizes and one prefill
    graph; returns, for each capture, whether the collector could run and what had been freed by then."""
    import gc
    from types import SimpleNamespace

    from minisgl_edu import graphs
    for name, fn in (("graph_pool_handle", lambda: None), ("Stream", lambda dev: None),
                     ("memory_reserved", lambda dev: 0), ("synchronize", lambda dev: None)):
        monkeypatch.setattr(torch.cuda, name, fn)
    freed: list[str] = []
    seen: list[tuple[bool, list[str]]] = []

    def capture(runner, batch):
        seen.append((gc.isenabled(), list(freed)))
        _Cycle(freed, f"made in capture {len(seen)}")  # garbage made while capturing
        kept = [[] for _ in range(3000)]  # allocations enough to start an automatic collection, where one may run
        return None, kept
    monkeypatch.setattr(graphs.GraphRunner, "_capture", capture)
    backend = SimpleNamespace(add_graph_wrapper=lambda *a: None, balanced_wrappers={})
    engine = SimpleNamespace(cfg=SimpleNamespace(max_running_reqs=2, cuda_graph_max_extend=256, warm_start=False, graph_head=False),
                             pool=SimpleNamespace(num_pages=8, page_size=1), backend=backend,
                             device=torch.device("cpu"), max_seq_len=512)
    _Cycle(freed, "a dead engine's graphs")
    graphs.GraphRunner(engine, 2, progress=False)
    return seen, freed


def test_graphs_are_captured_with_the_collector_paused(monkeypatch):
    """No cycle collection may run inside a capture (session 40: a collection mid-capture destroyed a dead engine's
    202 graphs, which a capturing stream forbids, and the capture failed); what was garbage before goes first."""
    import contextlib
    import gc

    from minisgl_edu import graphs
    assert gc.isenabled()
    seen, freed = _capture_record(monkeypatch)
    assert len(seen) == 2 + 3  # decode graphs of 1 and 2 rows; prefill graphs of 0, 1, 2 decode rows + 256 prompt rows
    assert all(not enabled for enabled, _ in seen)
    assert all(f == ["a dead engine's graphs"] for _, f in seen)  # collected before the first capture, none during
    assert gc.isenabled()  # restored after
    gc.collect()
    assert len(freed) == 1 + len(seen)
    # the wrong one, no pause: the collector is on in every capture and frees garbage between them
    monkeypatch.setattr(graphs, "gc_paused", contextlib.nullcontext)
    seen, freed = _capture_record(monkeypatch)
    assert all(enabled for enabled, _ in seen) and any(len(f) > 1 for _, f in seen)
    gc.collect()

    @contextlib.contextmanager
    def paused_only():  # the other wrong one: safe, but a dead engine's graphs keep their memory through every capture
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
    monkeypatch.setattr(graphs, "gc_paused", paused_only)
    seen, freed = _capture_record(monkeypatch)
    assert all(not enabled for enabled, _ in seen) and seen[0][1] == []
    gc.collect()


class _FakeWrapper:
    """A stand-in for FlashInfer's wrappers: its page-locked schedule buffer as a dead wrapper may leave one."""

    def __init__(self, *args, use_cuda_graph: bool = False, use_tensor_cores: bool = False, **kwargs):
        self.graph = use_cuda_graph
        self._pin_memory_int_workspace_buffer = torch.full((64,), 0x7F, dtype=torch.uint8)
        if use_cuda_graph and use_tensor_cores:  # as FlashInfer: a graph's tensor-core decode wrapper, one query a lane
            self._qo_indptr_buf = torch.arange(len(kwargs["paged_kv_last_page_len_buffer"]) + 1, dtype=torch.int32)


def _fake_backend(monkeypatch, split_reqs: int):
    """A FlashInfer backend (FlashInfer stood in for) with decode, balanced and prefill graph wrappers; `split_reqs`
    stands in for the requests FlashInfer's graph plans can still cut into chunks on this GPU."""
    import sys
    import types

    import minisgl_edu.attention.flashinfer as fi
    from minisgl_edu.graphs import PREFILL_LANES
    from minisgl_edu.paging import KVCache, PagePool
    fake = types.SimpleNamespace(BatchDecodeWithPagedKVCacheWrapper=_FakeWrapper,
                                 BatchPrefillWithPagedKVCacheWrapper=_FakeWrapper)
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.setattr(fi, "split_kv_bytes", lambda *a: 1024)  # it reads the GPU's multiprocessor count
    monkeypatch.setattr(fi, "split_reqs", lambda *a: split_reqs)  # so does this
    monkeypatch.setattr(fi, "PARALLEL_MIXED", False)  # no side stream on the CPU
    kv = KVCache(2, 64, 1, 3, 64, torch.float32, torch.device("cpu"))
    backend = fi.FlashInferBackend(kv, PagePool(64, 1, 4, 64, torch.device("cpu")), num_q_heads=9, workspace_bytes=1024)
    assert backend.balanced  # 9 query heads over 3: the CUDA-core kernel, and the balanced twin beside it
    indices = torch.zeros(fi.BALANCED_MIN_BS * 64, dtype=torch.int32)
    for bs in (1, fi.BALANCED_MIN_BS):
        backend.add_graph_wrapper(bs, indices)
    backend.add_graph_wrapper(0, indices, 256, PREFILL_LANES)
    return backend


def _unclean_graph_wrappers(monkeypatch) -> tuple[list[str], list[str]]:
    """The graph wrappers of _fake_backend whose schedule buffer still holds old bytes, and the eager wrappers' that
    were zeroed."""
    backend = _fake_backend(monkeypatch, 0)
    graph = {f"graph {k}": w for k, w in backend.graph_wrappers.items()}
    graph |= {f"balanced {k}": w for k, w in backend.balanced_wrappers.items()}
    eager = {"prefill": backend.prefill_wrapper, "decode": backend.decode_wrapper, "balanced": backend.balanced_wrapper}
    assert len(graph) == 4 and all(w.graph for w in graph.values()) and not any(w.graph for w in eager.values())
    zeroed = lambda w: not w._pin_memory_int_workspace_buffer.any()
    return [k for k, w in graph.items() if not zeroed(w)], [k for k, w in eager.items() if zeroed(w)]


def test_balanced_graphs_go_unsplit_only_past_the_requests_a_plan_can_split(monkeypatch):
    """TC_WHOLE: a balanced graph past split_reqs (where FlashInfer's graph plan cuts no request's keys, and only its
    merge would go) is planned unsplit, with a spare lane (SPARE_LANE: one more lane, no query row); one within it
    keeps the split plan, whose chunks balance long requests; the CUDA-core graphs are never unsplit."""
    import minisgl_edu.attention.flashinfer as fi
    assert fi.TC_WHOLE and fi.SPARE_LANE  # the defaults
    bs = fi.BALANCED_MIN_BS
    past = _fake_backend(monkeypatch, bs - 1)
    w = past.balanced_wrappers[bs]
    assert fi.whole_tc(w) and w._qo_indptr_buf.tolist() == list(range(bs + 1)) + [bs]
    assert past.spare_sizes == {bs} and not fi.whole_tc(past.graph_wrappers[bs, 0])
    within = _fake_backend(monkeypatch, bs)
    w = within.balanced_wrappers[bs]
    assert not fi.whole_tc(w) and w._qo_indptr_buf.tolist() == list(range(bs + 1)) and not within.spare_sizes
    step = lambda phase, size: Batch([], phase, padded_size=size)
    assert past.lanes(step("decode", bs)) == bs + 1 and within.lanes(step("decode", bs)) == bs  # the spare lane's plan
    assert past.lanes(step("prefill", bs)) == bs and past.lanes(step("decode", 1)) == 1
    from minisgl_edu.exercises.swap import patched
    no_lane = patched("minisgl_edu.attention.flashinfer:FlashInferBackend.lanes", (" + (not", " * (not"))
    assert no_lane(past, step("decode", bs)) == bs  # caught: the wrong hook plans no spare lane
    always = patched("minisgl_edu.attention.flashinfer:FlashInferBackend.add_graph_wrapper",
                     ("TC_WHOLE and bs > split_reqs(self.kv_heads, self.workspace.device)", "TC_WHOLE"))
    monkeypatch.setattr(fi.FlashInferBackend, "add_graph_wrapper", always)  # the wrong rule: unsplit at any size
    assert fi.whole_tc(_fake_backend(monkeypatch, bs).balanced_wrappers[bs])  # caught: within, yet unsplit
    monkeypatch.undo()
    monkeypatch.setattr(fi, "SPARE_LANE", False)  # the twin: unsplit, spares on request 0, no lane
    w = _fake_backend(monkeypatch, 0).balanced_wrappers[bs]
    assert fi.whole_tc(w) and len(w._qo_indptr_buf) == bs + 1


def test_graph_wrappers_start_from_a_clean_schedule(monkeypatch):
    """clean_schedule (session 41): every CUDA graph wrapper's page-locked schedule buffer is zeroed before its first
    plan (a graph's prefill plan leaves the spare blocks' entries as the buffer held them; old bytes there faulted on
    an H100). Eager wrappers plan exactly their blocks and are left alone. tests/gpu reads the plan back on the GPU."""
    import minisgl_edu.attention.flashinfer as fi
    assert _unclean_graph_wrappers(monkeypatch) == ([], [])
    monkeypatch.setattr(fi, "clean_schedule", lambda w: w)  # the wrong one: no zeroing
    unclean, _ = _unclean_graph_wrappers(monkeypatch)
    assert len(unclean) == 4  # caught, for every kind of graph wrapper
    monkeypatch.undo()
    real = fi.FlashInferBackend._decode_wrapper

    def cleans_every_one(self, bs=0, indices_buf=None, tensor_cores=None, **kw):  # the other wrong one: eager ones too
        return fi.clean_schedule(real(self, bs, indices_buf, tensor_cores, **kw))
    monkeypatch.setattr(fi.FlashInferBackend, "_decode_wrapper", cleans_every_one)
    assert _unclean_graph_wrappers(monkeypatch) == ([], ["decode", "balanced"])  # caught: 8 MB zeroed for nothing



def _check_spread(kernel_us, readings) -> None:
    """What spread.py must read from results.json rows (test_spread_reads_one_kernel_and_one_gpu)."""
    note = ("p2, graph replay; ratio = us per layer: nvjet_sm90_tst_64x32_64x16_1x2_h 6.6, "
            "void flashinfer::BatchDecodeWith 266.7, void flashinfer::norm::FusedAddR 2.9, qk_norm_rope_store 5.1")
    assert kernel_us(note, "BatchDecodeWith") == 266.7 and kernel_us(note, "qk_norm") == 5.1
    assert kernel_us(note, "BatchPrefill") is None and kernel_us("no list here", "nvjet") is None
    row = lambda metric, hw, date, value, ratio=None, n="": dict(metric=metric, hardware=hw, date=date, commit="c0",
                                                                  value=value, ratio=ratio, note=n)
    rows = [row("p2_decode_step_bs256_graph", "NVIDIA H200", "2026-12-02 01:00 UTC", 9.2, 1.24),
            row("p2_decode_step_bs256_graph", "NVIDIA H100 80GB HBM3", "2026-12-02 02:00 UTC", 11.6, 1.13),
            row("p2_decode_step_bs256_graph", "NVIDIA H200", "2026-11-29 23:00 UTC", 12.4, 1.69),
            row("x_kernels_per_layer_bs256", "NVIDIA H200", "2026-12-03 00:00 UTC", 9, 309.0, note),
            row("x_kernels_per_layer_bs64", "NVIDIA H200", "2026-12-03 00:00 UTC", 9, 80.0, note.replace("266.7", "70.1"))]
    got = readings(rows, "H200", "p2_decode_step_bs256_graph", since="2026-12-01")
    assert [(v, r) for *_, v, r in got] == [(9.2, 1.24)]  # the H100's and the older H200 reading are left out
    assert [v for *_, v, _ in readings(rows, "H200", kernel="BatchDecodeWith")] == [266.7]  # bs256 only
    assert [v for *_, v, _ in readings(rows, "H200", kernel="BatchDecodeWith", bs=64)] == [70.1]


def test_spread_reads_one_kernel_and_one_gpu():
    """benchmarks/spread.py (session 49): a kernel's µs a layer is read from a kernel list by its own name, on the GPU
    and from the date asked for. Kept wrong: the list's first figure whatever its kernel (the attention read off
    the products' GEMM), and readings that ignore the date."""
    sys_path_benchmarks()
    import spread
    _check_spread(spread.kernel_us, spread.readings)
    first = lambda note, kernel: float(note.split("us per layer:")[1].split(",")[0].split()[-1]) \
        if "us per layer:" in note and kernel in note else None  # wrong: the first entry's figure
    with pytest.raises(AssertionError):
        _check_spread(first, spread.readings)  # caught: 6.6, the GEMM's
    undated = lambda rows, gpu, metric=None, kernel=None, bs=256, since="": spread.readings(rows, gpu, metric, kernel, bs)
    with pytest.raises(AssertionError):
        _check_spread(spread.kernel_us, undated)  # caught: the 2026-11-29 reading counted too


def sys_path_benchmarks() -> None:
    import sys
    from pathlib import Path
    path = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if path not in sys.path:
        sys.path.insert(0, path)


def _check_timeline(busy_time, layers) -> None:
    """What timeline_gaps.py must find in a replay's kernel spans (test_timeline_gaps_splits_a_layer)."""
    sys_path_benchmarks()
    import timeline_gaps as tg
    # two layers: attention 0-10, a product 11-15, a norm 14-16 (launched early: PDL), then the next attention at 18
    spans = [("BatchDecode", 0.0, 10.0), ("nvjet", 11.0, 15.0), ("norm", 14.0, 16.0),
             ("BatchDecode", 18.0, 28.0), ("nvjet", 28.5, 32.0), ("BatchDecode", 33.0, 40.0)]
    assert busy_time(spans[:3]) == 15.0  # 0-10 and 11-16: the norm's overlap counted once
    ls = layers(spans, "BatchDecode")
    assert [len(layer) for layer, _ in ls] == [3, 2] and [stop for _, stop in ls] == [18.0, 33.0]
    first = tg.split(*ls[0])
    assert first == dict(span=18.0, busy=15.0, gaps=3.0, overlap=1.0, durations=16.0)  # 1 + 2 µs of gaps
    kinds = tg.per_kind(ls[:1])
    assert [round(g, 1) for *_, g in kinds] == [1.0, -1.0, 2.0]  # the norm began 1 µs before the product ended


def test_timeline_gaps_splits_a_layer(monkeypatch):
    """benchmarks/timeline_gaps.py (session 49): a replay's time is busy (some kernel running) + gaps (none), a
    layer runs from its attention kernel to the next one's start, and overlapping kernels (PDL) count once. Kept
    wrong: busy time as the sum of durations (overlap counted twice, gaps too small), and a layer that ends at its last
    kernel's end (the gap before the next layer lost)."""
    sys_path_benchmarks()
    import timeline_gaps as tg
    _check_timeline(tg.busy_time, tg.layers)
    summed = lambda spans: sum(b - a for _, a, b in spans)
    monkeypatch.setattr(tg, "busy_time", summed)
    with pytest.raises(AssertionError):
        _check_timeline(summed, tg.layers)  # caught: 16 µs busy, 2 µs of gaps
    monkeypatch.undo()
    real = tg.layers
    ends_early = lambda spans, kernel: [(layer, max(b for *_, b in layer)) for layer, _ in real(spans, kernel)]
    with pytest.raises(AssertionError):
        _check_timeline(tg.busy_time, ends_early)  # caught: the layer's last 2 µs gap gone
