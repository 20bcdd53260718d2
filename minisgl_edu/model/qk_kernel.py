"""Chapter 7 — A kernel of our own: q/k norm, RoPE and the K/V store of one layer in one launch.

`qk_norm_rope_store.cu` (and `kv_indices.cu`, kernel_args' slots in one launch; an experiment,
`silu_mul_down.cu`: products of <= 8 rows), compiled to
cubins by `scripts/build_fi_extra_kernels.sh` and launched through the CUDA driver API with ctypes;
without a cubin `available()` is False and FlashInfer's kernels serve.
"""
from __future__ import annotations

import ctypes
import os
import pathlib

import torch

NAME = "qk_norm_rope_store"
CUBINS = {NAME: "qk_norm_rope_store.cubin", "silu_mul_down": "silu_mul_down.cubin",
          "small_m_linear": "silu_mul_down.cubin", "kv_indices": "kv_indices.cubin"}  # kernel -> file
_FUNCS: dict[tuple[int, str], object] = {}  # (device index, kernel) -> (libcuda, function), or None: no cubin


def cubin_path(name: str = NAME) -> pathlib.Path:
    root = pathlib.Path(__file__).resolve().parents[2]
    return pathlib.Path(os.environ.get("MINISGL_CUBIN_DIR", root / ".gpu" / "kernels")) / CUBINS[name]


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


def _launch(name: str, device: torch.device, blocks: int, threads: int, args: list, shared: int = 0) -> None:
    cuda, fn = _kernel(device, name)
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])  # void** kernelParams
    stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
    _check(cuda.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, shared, stream, params, None), "cuLaunchKernel")


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


def _small_m(name: str, x: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor | None:
    """Launch `name` (silu_mul_down.cu) on x's m <= 8 rows against w [n, k]; None where it does not apply."""
    m, n = x.shape[0], w.shape[0]
    if not (1 <= m <= 8 and k % 256 == 0 and k <= 4096 and m * k * 2 <= 48 << 10) or \
            w.shape[1] != k or not w.is_contiguous() or x.stride(1) != 1 or x.stride(0) % 8 or \
            x.data_ptr() % 16 or w.data_ptr() % 16 or w.dtype != x.dtype or not available(x, name):
        return None
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    warps = 8  # output rows per block
    _launch(name, x.device, -(-n // warps), 32 * warps,
            [_ptr(x), ctypes.c_longlong(x.stride(0)), ctypes.c_int(m), ctypes.c_int(k), _ptr(w), ctypes.c_int(n),
             _ptr(out)], shared=m * k * 2)
    return out


def silu_mul_down(gu: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
    """down(silu(gate) * up) for gu = [gate | up] of 1..8 rows and w = W_down [hidden, inter], in one launch;
    None where the kernel does not apply (then: silu_and_mul and F.linear)."""
    return _small_m("silu_mul_down", gu, w, gu.shape[1] // 2)


def small_m_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor | None:
    """x @ w.T for 1..8 rows in one launch; None where the kernel does not apply (then: F.linear)."""
    return _small_m("small_m_linear", x, w, x.shape[1])


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
