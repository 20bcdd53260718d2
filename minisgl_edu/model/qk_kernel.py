"""Chapter 7 — A kernel of our own: q/k norm, RoPE and the K/V store of one layer in one launch.

`qk_norm_rope_store.cu` (and `kv_indices.cu`, kernel_args' slots in one launch; `gemv.cu`, one row
through a linear layer, the MLP's SiLU-and-mul riding along; `skinny_gemm.cu`, 2-16 rows on the tensor cores),
compiled to
cubins by `scripts/build_fi_extra_kernels.sh` and launched through the CUDA driver API with ctypes;
without a cubin `available()` is False and FlashInfer's kernels serve.
"""
from __future__ import annotations

import ctypes
import os
import pathlib

import torch

NAME = "qk_norm_rope_store"
CUBINS = {NAME: "qk_norm_rope_store.cubin", "kv_indices": "kv_indices.cubin",  # kernel -> file; gemv*: gemv.cubin
          "greedy_argmax": "greedy.cubin"}  # and skinny_*: skinny_gemm.cubin
_FUNCS: dict[tuple[int, str], object] = {}  # (device index, kernel) -> (libcuda, function), or None: no cubin


def cubin_path(name: str = NAME) -> pathlib.Path:
    root = pathlib.Path(__file__).resolve().parents[2]
    file = "gemv.cubin" if name.startswith(tuple(f"{kind}gemv_" for kind in GEMV_KINDS)) \
        else "skinny_gemm.cubin" if name.startswith("skinny_") else CUBINS[name]  # every shape and variant of each
    return pathlib.Path(os.environ.get("MINISGL_CUBIN_DIR", root / ".gpu" / "kernels")) / file


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"CUDA driver call {what} failed with error {rc}")


def _kernel(device: torch.device, name: str = NAME):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if (idx, name) not in _FUNCS:
        path = cubin_path(name)
        if not path.exists() or torch.cuda.get_device_capability(idx) != (9, 0):  # built for sm_90a only
            _FUNCS[idx, name] = None
        else:
            cuda = ctypes.CDLL("libcuda.so.1")
            with torch.cuda.device(idx):
                torch.empty(1, device=f"cuda:{idx}")  # makes the device's primary context current here
                mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
                _check(cuda.cuModuleLoadData(ctypes.byref(mod), path.read_bytes()), "cuModuleLoadData")
                _check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), "cuModuleGetFunction")
            _FUNCS[idx, name] = (cuda, fn)
    return _FUNCS[idx, name]


def available(x: torch.Tensor, name: str = NAME) -> bool:
    return x.is_cuda and x.dtype == torch.bfloat16 and _kernel(x.device, name) is not None


# Programmatic dependent launch (sm_90; chapter 7): a kernel launched with this attribute may start before the
# kernel before it in the stream ends; it loads what depends on no kernel, then waits (griddepcontrol.wait).
LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # cuda.h's CUlaunchAttributeID


class LaunchAttribute(ctypes.Structure):  # cuda.h's CUlaunchAttribute: an id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):  # cuda.h's CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


_OPTED_IN: set[tuple[torch.device, str]] = set()  # (device, kernel) allowed more than 48 KB of dynamic shared memory


class _Launch:
    """One kernel's launch on one stream, its configuration built once: `_launch` makes one a call; the model's
    skinny GEMM keeps one a shape (a plan), so a hot kernel pays the host only for its arguments."""

    def __init__(self, name: str, device: torch.device, blocks: int | tuple[int, int], threads: int, shared: int = 0,
                 pdl: bool = False, stream: int | None = None) -> None:
        self.cuda, self.fn = _kernel(device, name)
        if shared > 48 * 1024 and (device, name) not in _OPTED_IN:  # the probes' shapes: ask for more, once a kernel
            _check(self.cuda.cuFuncSetAttribute(self.fn, 8, shared), "cuFuncSetAttribute")  # MAX_DYNAMIC_SHARED_SIZE_BYTES
            _OPTED_IN.add((device, name))
        self.stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream if stream is None else stream)
        self.bx, self.by = blocks if isinstance(blocks, tuple) else (blocks, 1)
        self.threads, self.shared, self.pdl = threads, shared, pdl
        if pdl:
            self.attr = LaunchAttribute(id=LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)  # kept alive
            self.config = LaunchConfig((self.bx, self.by, 1), (threads, 1, 1), shared, self.stream,
                                       ctypes.pointer(self.attr), 1)

    def __call__(self, params) -> None:  # params: void** kernelParams (the driver copies the values at launch)
        if not self.pdl:
            _check(self.cuda.cuLaunchKernel(self.fn, self.bx, self.by, 1, self.threads, 1, 1, self.shared, self.stream,
                                            params, None), "cuLaunchKernel")
        else:
            _check(self.cuda.cuLaunchKernelEx(ctypes.byref(self.config), self.fn, params, None), "cuLaunchKernelEx")


def _params(args: list):
    return (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])


def _launch(name: str, device: torch.device, blocks: int | tuple[int, int], threads: int, args: list,
            shared: int = 0, pdl: bool = False) -> None:
    """Launch a cubin's kernel on the current stream; pdl=True (only for kernels that griddepcontrol.wait before
    reading what the kernel before them wrote): with programmatic stream serialization."""
    _Launch(name, device, blocks, threads, shared, pdl)(_params(args))


def _ptr(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr() if t is not None else 0)


def qk_norm_rope_store(qkv: torch.Tensor, q_heads: int, kv_heads: int, head_dim: int, positions: torch.Tensor,
                       cos_sin: torch.Tensor, q_w: torch.Tensor | None, k_w: torch.Tensor | None, eps: float,
                       k_pool: torch.Tensor, v_pool: torch.Tensor, out_loc: torch.Tensor) -> None:
    """In place on qkv [tokens, (q_heads + 2 kv_heads) * head_dim]: q = rope(norm(q)); and
    k_pool[out_loc] = rope(norm(k)), v_pool[out_loc] = v. Norms are skipped when q_w is None."""
    n = qkv.shape[0]
    if n == 0:
        return
    assert qkv.stride(1) == 1 and head_dim % 64 == 0 and head_dim <= 256 and cos_sin.shape[1] == head_dim
    assert cos_sin.dtype == torch.float32 and cos_sin.is_contiguous()
    positions, out_loc = positions.long(), out_loc.long()  # no-ops when already int64 (the engine's case)
    assert k_pool.is_contiguous() and v_pool.is_contiguous() and k_pool.shape[1:] == (kv_heads, head_dim)
    warps_per_block = 4
    blocks = -(-n * (q_heads + kv_heads) // warps_per_block)
    _launch(NAME, qkv.device, blocks, 32 * warps_per_block,
            [_ptr(qkv), ctypes.c_longlong(qkv.stride(0)), ctypes.c_int(n), ctypes.c_int(q_heads),
             ctypes.c_int(kv_heads), ctypes.c_int(head_dim), _ptr(positions), _ptr(cos_sin), _ptr(q_w), _ptr(k_w),
             ctypes.c_float(eps), _ptr(k_pool), _ptr(v_pool), _ptr(out_loc)])


GEMV_KINDS = ("", "silu_", "norm_")  # gemv.cu's entry points: {kind}gemv_t{T}_r{R}_j{J}
GEMV_JS = (1, 2, 3, 4, 6)  # 16-byte chunks per thread and row that gemv.cu is built for
GEMV_BUILT = ((128, 2), (128, 4), (256, 2), (256, 4))  # (threads, rows per block)
# (threads, rows per block) per product, None: cuBLAS; "column": q|k|v, gate|up; "row": o_proj; "silu": the MLP's tail
# (the H200, in the model: 4 rows per block beat the 2 that bench_gpu.py's cold sweep prefers; chapter 7).
# "row" (o_proj) is off: our GEMV needs o_proj row-major, and served on one H200 the steps of many rows were
# 0.3-0.5 ms slower so (mixed 2.39 against 2.07 ms, SmolLM2, one A/B); cuBLAS keeps its column-major layout
GEMV_CONFIG: dict[str, tuple[int, int] | None] = {"column": (128, 4), "row": None, "silu": (256, 4)}


def gemv_name(kind: str, k: int, threads: int, rows: int) -> str | None:
    """gemv.cu's entry point ("", "silu_" or "norm_" kind) for an input row of k elements, or None when none covers k."""
    j = next((j for j in GEMV_JS if j * threads * 8 >= k), None)
    return None if j is None or (threads, rows) not in GEMV_BUILT else f"{kind}gemv_t{threads}_r{rows}_j{j}"


def gemv_ready(device: torch.device) -> bool:
    """Whether gemv.cu's cubin loads on `device` (the model keeps o_proj row-major for it: model/__init__.py)."""
    return device.type == "cuda" and _kernel(device, gemv_name("", 8, 128, 4)) is not None


def _row(t: torch.Tensor, k: int, dtype) -> bool:
    """t is one 16-byte-aligned row of at least k contiguous elements of `dtype`."""
    return t.dim() == 2 and t.shape[0] == 1 and t.shape[1] >= k and t.stride(1) == 1 and t.data_ptr() % 16 == 0 \
        and t.dtype == dtype and t.is_cuda


def gemv(x: torch.Tensor, w: torch.Tensor, silu: bool = False, config: tuple[int, int] | None = None,
         residual: torch.Tensor | None = None, norm_weight: torch.Tensor | None = None, eps: float = 0.0,
         pdl: bool = False):
    """x @ w.T for one row x and w [n, k] row-major, in one launch; None where the kernel does not apply (then:
    cuBLAS). silu: x = [gate | up], the product's input is silu(gate) * up. With a residual row: the input is
    rmsnorm(x + residual) * norm_weight, and the result is (product, x + residual). pdl: launched so that its weight
    loads overlap the end of the kernel before it (programmatic dependent launch; gemv.cu waits before reading x)."""
    k = x.shape[1] // 2 if silu else x.shape[1]
    kind = "silu_" if silu else "norm_" if residual is not None else ""
    threads, rows = config or GEMV_CONFIG["silu" if silu else "column" if residual is not None else "row"] or (128, 4)
    if not _row(x, k, w.dtype) or k % 8 or w.dim() != 2 or w.shape[1] != k or not w.is_contiguous() or \
            w.data_ptr() % 16 or (name := gemv_name(kind, k, threads, rows)) is None or not available(x, name):
        return None
    if residual is not None and (residual.shape != (1, k) or not _row(residual, k, x.dtype) or norm_weight is None
                                 or norm_weight.shape != (k,) or norm_weight.dtype != x.dtype or norm_weight.data_ptr() % 16):
        return None
    n = w.shape[0]
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    args = [_ptr(x), ctypes.c_int(k), _ptr(w), ctypes.c_int(n), _ptr(out)]
    if residual is None:
        _launch(name, x.device, -(-n // rows), threads, args, pdl=pdl)
        return out
    res_out = torch.empty_like(residual)
    _launch(name, x.device, -(-n // rows), threads, args + [_ptr(residual), _ptr(norm_weight), ctypes.c_float(eps), _ptr(res_out)],
            pdl=pdl)
    return out, res_out


def kv_indices(page_table: torch.Tensor, rows: torch.Tensor, cu_k: torch.Tensor, total: int) -> torch.Tensor | None:
    """out[cu_k[i] + p] = page_table[rows[i], p] for p < cu_k[i + 1] - cu_k[i] (int32 on the device, rows and cu_k
    too), in one launch; None without the cubin (then kernel_args gathers with PyTorch ops)."""
    if not page_table.is_cuda or page_table.dtype != torch.int32 or _kernel(page_table.device, "kv_indices") is None:
        return None
    out = torch.empty(total, dtype=torch.int32, device=page_table.device)
    if len(rows):
        _launch("kv_indices", page_table.device, len(rows), 256,
                [_ptr(page_table), ctypes.c_longlong(page_table.stride(0)), _ptr(rows), _ptr(cu_k), _ptr(out)])
    return out


GREEDY_CHUNK = 4096  # logits of one row a block of 128 threads reduces (four 16-byte loads each): 38 blocks a row of 151,936
# (device index, stream) -> greedy_argmax's per-row counters, zero between launches. One set per stream: launches on
# one stream run one after the other, but two engines' streams (a test comparing two) may run theirs side by side
_TICKETS: dict[tuple[int, int], torch.Tensor] = {}


def greedy(logits: torch.Tensor, rows: torch.Tensor | None = None, pos: torch.Tensor | None = None,
           token_pool: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """int32 tokens[r] = argmax of bf16 logits[r] (torch.argmax's choice: the first of equal maxima, NaN above all),
    also written to token_pool[rows[r], pos[r]] when the pool is given (rows, pos int64), in one launch (greedy.cu),
    into `out` when given (int32, contiguous: a CUDA graph's static buffer); None without the cubin or for other
    inputs (then torch.argmax serves)."""
    if not logits.is_cuda or logits.dtype != torch.bfloat16 or logits.dim() != 2 or not logits.is_contiguous() \
            or _kernel(logits.device, "greedy_argmax") is None:
        return None
    n, vocab = logits.shape
    if out is None:
        out = torch.empty(n, dtype=torch.int32, device=logits.device)
    assert out.shape == (n,) and out.dtype == torch.int32 and out.is_contiguous()
    if n == 0:
        return out
    if token_pool is not None:
        assert token_pool.dtype == torch.int32 and token_pool.stride(1) == 1 and rows.dtype == pos.dtype == torch.int64
    idx = logits.device.index if logits.device.index is not None else torch.cuda.current_device()
    key = (idx, torch.cuda.current_stream(logits.device).cuda_stream)
    tickets = _TICKETS.get(key)
    if tickets is None or len(tickets) < n:
        tickets = _TICKETS[key] = torch.zeros(max(n, 512), dtype=torch.int32, device=logits.device)
    chunks = -(-vocab // GREEDY_CHUNK)
    partial = torch.empty(n * chunks, dtype=torch.int64, device=logits.device)
    vec = vocab % 8 == 0 and logits.data_ptr() % 16 == 0
    _launch("greedy_argmax", logits.device, (chunks, n), 128,
            [_ptr(logits), ctypes.c_int(vocab), ctypes.c_int(GREEDY_CHUNK), ctypes.c_int(int(vec)), _ptr(partial),
             _ptr(tickets), _ptr(out), _ptr(token_pool), ctypes.c_longlong(token_pool.stride(0) if token_pool is not None else 0),
             _ptr(rows if token_pool is not None else None), _ptr(pos if token_pool is not None else None)])
    return out


SKINNY_ROWS = 16  # skinny_gemm.cu's one 16-row tile: 2-16 rows; more rows go to cuBLAS (ours grows with them, chapter 7)
SKINNY_WARPS = 8  # a block: 8 warps of 8 features, 64 output features
SKINNY_MIN_BLOCKS = 48  # the longest K slice that still gives this many blocks (the H100's best shape for each product)
SKINNY_GA_BUILT = ((1, 1), (4, 1), (1, 2), (4, 2), (1, 4), (4, 4))  # (x copy groups, accumulator chains) built (NT 1, 8 warps)
SKINNY_GA = (1, 1)  # the model's; 4, 1 was 6-10 % faster alone (session 37, H100), not yet run in the model
SKINNY_WS = 1 << 20  # float partials a (device, stream) keeps: S slices x rows x features
# (device index, stream) -> (float partials, per-feature-tile tickets, zero between launches); one set per stream as
# greedy's: launches on one stream run one after the other (a PDL-launched one writes them only after its wait)
_SKINNY: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def skinny_j(n: int, k: int) -> int | None:
    """skinny_gemm.cu's K slice (J chunks of 32) for a [n, k] weight: the longest of 32, 16, 8 that divides k and
    leaves at least SKINNY_MIN_BLOCKS blocks, else the shortest that divides it; None when n or k does not tile."""
    if n % (8 * SKINNY_WARPS):
        return None
    fits = [j for j in (32, 16, 8) if k % (32 * j) == 0]
    return next((j for j in fits if n // (8 * SKINNY_WARPS) * (k // (32 * j)) >= SKINNY_MIN_BLOCKS), fits[-1] if fits else None)


def skinny(x: torch.Tensor, w: torch.Tensor, pdl: bool = True) -> torch.Tensor | None:
    """x @ w.T for 2-16 rows x [m, k] and w [n, k], both row-major, on the tensor cores in one launch (two kernels'
    worth: split-K partials summed by each feature tile's last block, in slice order, so the result repeats bit for
    bit); None where it does not apply (then: cuBLAS). pdl: its weights load while the kernel before it ends."""
    m, k = x.shape if x.dim() == 2 else (0, 0)
    if not 2 <= m <= SKINNY_ROWS or not x.is_cuda or x.dtype != torch.bfloat16 or w.dtype != x.dtype \
            or not x.is_contiguous() or not w.is_contiguous() or w.dim() != 2 or w.shape[1] != k \
            or x.data_ptr() % 16 or w.data_ptr() % 16:
        return None
    n = w.shape[0]
    key = (x.device.index, _raw_stream(x.device), n, k, pdl, SKINNY_GA)
    plan = _SKINNY_PLANS.get(key, False)
    if plan is False:
        plan = _skinny_plan(x.device, key[1], n, k, pdl)
        if plan is None and torch.cuda.is_current_stream_capturing():
            return None  # no workspace yet on the capture stream: cuBLAS, and ask again next time
        _SKINNY_PLANS[key] = plan
    if plan is None or plan.slices * m * n > SKINNY_WS:
        return None
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    plan(x, m, w, out)
    return out


def _raw_stream(device: torch.device) -> int:
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what current_stream().cuda_stream reads, cheaper
    return get(device.index) if get is not None else torch.cuda.current_stream(device).cuda_stream


class _SkinnyPlan:
    """skinny_gemm.cu's model shape for one (device, stream, n, k): its launch and the arguments that do not change,
    made once; a call sets x, m, w and out and launches."""

    def __init__(self, device: torch.device, stream: int, n: int, k: int, j: int, ws: torch.Tensor,
                 tickets: torch.Tensor, pdl: bool) -> None:
        name, blocks, threads, shared = skinny_geometry(n, k, j, groups=SKINNY_GA[0], accs=SKINNY_GA[1])
        self.launch = _Launch(name, device, blocks, threads, shared, pdl, stream)
        self.slices = blocks[1]
        self.args = [ctypes.c_void_p(), ctypes.c_int(), ctypes.c_void_p(), ctypes.c_int(n), ctypes.c_int(k),
                     ctypes.c_void_p(), _ptr(ws), _ptr(tickets)]
        self.params = _params(self.args)
        self.keep = (ws, tickets)

    def __call__(self, x: torch.Tensor, m: int, w: torch.Tensor, out: torch.Tensor) -> None:
        a = self.args  # one host thread launches on a (device, stream): the values are copied at launch
        a[0].value, a[1].value, a[2].value, a[5].value = x.data_ptr(), m, w.data_ptr(), out.data_ptr()
        self.launch(self.params)


_SKINNY_PLANS: dict[tuple, _SkinnyPlan | None] = {}  # (device index, stream, n, k, pdl, SKINNY_GA) -> plan; None: cuBLAS


def _skinny_plan(device: torch.device, stream: int, n: int, k: int, pdl: bool) -> _SkinnyPlan | None:
    j = skinny_j(n, k)
    if j is None or _kernel(device, skinny_name(1, 1, j, SKINNY_WARPS, *SKINNY_GA)) is None \
            or n // (8 * SKINNY_WARPS) > 1024:
        return None
    if (device.index, stream) not in _SKINNY:
        if torch.cuda.is_current_stream_capturing():  # not inside a graph's pool: the graph's eager warm-up made it
            return None
        _SKINNY[device.index, stream] = (torch.empty(SKINNY_WS, dtype=torch.float32, device=device),
                                         torch.zeros(1024, dtype=torch.int32, device=device))
    return _SkinnyPlan(device, stream, n, k, j, *_SKINNY[device.index, stream], pdl)


def skinny_name(mt: int, nt: int, j: int, warps: int, groups: int = 1, accs: int = 1) -> str:
    """skinny_gemm.cu's entry point for a shape; groups, accs (the probe's, session 36): x copied in that many groups,
    that many accumulator chains (1, 1: the model's)."""
    return f"skinny_m{mt}_n{nt}_j{j}_w{warps}" + ("" if (groups, accs) == (1, 1) else f"_g{groups}_a{accs}")


def skinny_geometry(n: int, k: int, j: int, warps: int = SKINNY_WARPS, mt: int = 1, nt: int = 1, groups: int = 1,
                    accs: int = 1) -> tuple[str, tuple[int, int], int, int]:
    """skinny_gemm.cu's entry point, grid (feature tiles, K slices), threads and shared bytes for a [n, k] weight,
    K slices of 32 j, `warps` warps of nt groups of 8 features, mt 16-row tiles."""
    shared = 16 * mt * (32 * j + 32) * 2  # x's slice, its rows padded by 64 bytes each (the model's: at most 33 KB)
    return skinny_name(mt, nt, j, warps, groups, accs), (n // (8 * nt * warps), k // (32 * j)), 32 * warps, shared


def skinny_launch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ws: torch.Tensor, tickets: torch.Tensor, j: int,
                  warps: int = SKINNY_WARPS, mt: int = 1, nt: int = 1, pdl: bool = True, groups: int = 1,
                  accs: int = 1) -> None:
    """One launch of skinny_gemm.cu's shape (mt 16-row tiles, nt groups of 8 features a warp, K slices of 32 j,
    `warps` warps a block; groups, accs: see skinny_name) writing x @ w.T into out, for the probe
    (benchmarks/lt_probe.py --skinny), which times every shape built; the model launches its one shape through a
    plan (skinny) with the same geometry."""
    (m, k), n = x.shape, w.shape[0]
    name, blocks, threads, shared = skinny_geometry(n, k, j, warps, mt, nt, groups, accs)
    _launch(name, x.device, blocks, threads,
            [_ptr(x), ctypes.c_int(m), _ptr(w), ctypes.c_int(n), ctypes.c_int(k), _ptr(out), _ptr(ws), _ptr(tickets)],
            shared=shared, pdl=pdl)
