"""Supporting module (chapters 6, 8, 9) — one run's configuration: which switches exist, and where is each default?

`EngineConfig` ⊂ `SchedulerConfig` ⊂ `ServerConfig`: frozen, keyword-only, so `LLM(**kw)`, `serve`'s flags
and `build_scheduler(cfg)` speak the same keywords. Each default is declared here once (`None`: resolved
where the machine or the model is known, as the field's comment says).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing config stays free of torch
    import torch

log = logging.getLogger("minisgl_edu")


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    model_path: str
    device: str | None = None  # None: cuda when present, else cpu (resolved at construction)
    dtype: torch.dtype | None = None  # None: float32 on CPU, bfloat16 on CUDA
    page_size: int = 1
    max_running_reqs: int = 256
    max_seq_len: int | None = None  # None: the model's max_position_embeddings
    max_total_tokens: int | None = None  # KV pool size; None: 32k on CPU, memory_fraction on CUDA
    memory_fraction: float = 0.85
    dummy_weights: bool = False
    attention: str | None = None  # "reference" | "flashinfer"; None: by device
    cuda_graph_max_bs: int = 256
    graph_head: bool = True  # CUDA, one rank: the decode graphs also run the LM head and the greedy argmax (one replay a step); False: both launched after it (chapter 7)
    cuda_graph_max_extend: int = 2048  # prefill tokens (beyond one per request) a captured prefill-step graph holds; 0: prefill steps run eager
    fused_kernels: bool = True  # FlashInfer's fused RMSNorm/RoPE/SiLU-and-mul on CUDA in 16 bits; False: plain ops
    qk_kernel: bool = True  # with fused_kernels: our one-launch q/k norm + RoPE + K/V store; False: FlashInfer's
    gemv_kernel: bool = True  # with fused_kernels: one row through our GEMV, SiLU-and-mul + down in one launch; False: cuBLAS
    pdl: bool = True  # with gemv_kernel: programmatic dependent launch, each GEMV's weights load while the kernel before it ends (chapter 7)
    skinny_gemm: bool = True  # with fused_kernels and pdl: 2-16 rows through our tensor-core GEMM (skinny_gemm.cu); False: cuBLAS (chapter 7)
    moe_impl: str | None = None  # "reference" | "grouped" (chapter 10); None: reference on CPU, grouped on CUDA
    lean_step: bool = True  # skip per-step work no request needs (sampling controls, float32 logits); False: the plain step
    warm_start: bool = True  # CUDA: replay each graph once and run the LM head at every row count before serving; False: first uses pay
    host_threads: int | None = None  # torch's CPU threads in this process; None: host_threads_for's rule (4 on CUDA)
    seed: int = 0

    def __post_init__(self):
        _at_least_one(self, "page_size", "host_threads")
        if self.device is None:  # frozen: resolved once, here
            object.__setattr__(self, "device", default_device())


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig(EngineConfig):
    tp: int = 1  # scheduler ranks, one process each when > 1 (chapter 8)
    max_prefill_tokens: int | None = None  # the token budget of one prefill step (chapter 3); None: 16384 on CUDA, 8192 on CPU
    cache: str = "radix"  # "radix" | "naive" (chapter 5)
    overlap: bool | None = None  # None: on for CUDA, off on the CPU (chapter 6)
    early_admit: bool = False  # overlap loop: the next step's admission runs while step N's tokens travel (measured: no gain, chapter 6)
    mixed_chunk: bool | None = None  # decode rows ride in every prefill step (chapter 6); None: on for CUDA, off on the CPU
    mixed_prefill_tokens: int | None = None  # the token budget of a prefill step decode rows ride in; None: on CUDA by the model's size (scheduler.mixed_tokens_for), else max_prefill_tokens
    mixed_backlog_tokens: int | None = None  # ... while at most this many prompt tokens wait (more: the full budget); None: 4096
    trace: str | None = None  # a Perfetto step trace (chapter 6); with tp > 1 rank 0 writes it at exit
    hop_log: str | None = None  # every process appends one JSON line per message hop here (chapter 1)
    tp_timeout_s: float = 600.0  # a collective that waits longer raises instead of hanging (chapter 8)
    startup_timeout: float = 600.0  # every rank (and worker) has said "ready" by then
    use_count: bool = True  # False: chapter 8's counter-example, each rank takes what *it* has seen
    forward_lag_s: float = 0.0  # chapter 8: rank 0 forwards each step's messages this late (a slow link)
    skip_tokenizer_init: bool = False  # token ids in, token ids out: no process loads a tokenizer (chapter 9)
    reply_socket: bool = True  # the replies' hops (scheduler -> detokenizer -> API) over plain UNIX sockets; False: ZMQ (chapter 1)

    def __post_init__(self):
        super().__post_init__()
        _at_least_one(self, "tp", "max_prefill_tokens", "mixed_prefill_tokens", "mixed_backlog_tokens")
        if self.mixed_backlog_tokens is not None and self.mixed_prefill_tokens is None and \
                not str(self.device).startswith("cuda"):  # only CUDA has a default mixed budget for it to limit
            raise ValueError("mixed_backlog_tokens limits mixed_prefill_tokens, which is not set (no default off CUDA)")


@dataclass(frozen=True, kw_only=True)
class ServerConfig(SchedulerConfig):
    served_name: str = ""  # the name clients send; "": the model folder's name
    num_tokenizers: int = 1
    host: str = "127.0.0.1"
    port: int = 1919
    api_key: str | None = None
    naive_stream: bool = False  # the per-token twins: one decode call per token, one SSE event per token
    http_parser: str | None = None  # uvicorn's HTTP parser: "httptools" | "h11"; None: httptools when installed (the compiled one)
    early_receive: bool = True  # one rank, overlap loop: new requests are read while a step's tokens travel; False: at the loop's top only
    direct_write: bool = True  # a stream's plain tokens are written by the API's receiver itself; False: by its own task
    gc_threshold: int = 10_000  # each server process collects after this many net new tracked objects; 700: Python's default

    def __post_init__(self):
        super().__post_init__()
        _at_least_one(self, "num_tokenizers", "gc_threshold")  # 0 would switch the collector off
        if self.http_parser not in (None, "httptools", "h11"):
            raise ValueError(f"http_parser must be 'httptools' or 'h11', got {self.http_parser!r}")
        if self.http_parser == "httptools" and not _installed("httptools"):  # refused before any worker starts
            raise ValueError("http_parser 'httptools': the httptools package is not installed")
        if not self.served_name:
            object.__setattr__(self, "served_name", os.path.basename(os.path.normpath(self.model_path)))


def _at_least_one(cfg, *fields: str) -> None:
    for name in fields:  # None: a default resolved later, always >= 1
        if (v := getattr(cfg, name)) is not None and v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")


def _installed(module: str) -> bool:
    from importlib.util import find_spec
    return find_spec(module) is not None


def default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def host_threads_for(cfg: EngineConfig, device_type: str, rank_process: bool = False) -> int | None:
    """torch's CPU threads for a process that runs an engine (None: leave torch's default). An explicit
    `host_threads` always wins; `rank_process`: a scheduler rank of the server or of LLM(tp > 1)."""
    if cfg.host_threads is not None:
        return cfg.host_threads
    if device_type == "cuda":
        # 16 OpenMP threads for the step's tiny host ops only spin, and beside busy server processes they get
        # descheduled mid-op: on an H200 the server ran at 9.4k tok/s with them, 33k with 4 (issue 18)
        return min(4, os.cpu_count() or 1)
    if device_type == "cpu" and rank_process:
        # ranks share the cores. The API, tokenizer and detokenizer are mostly idle beside a CPU forward, so a rank
        # takes its whole share; its OpenMP threads spin briefly before they sleep when its cores are busy at launch
        # (server.launcher.rank_env), which is what made a core fewer unnecessary: on 2 cores, 0.95x offline against
        # 0.74x with one thread, and no worse beside two busy loops (issue 18; libgomp's long spin there: ~9x slower)
        return max(1, (os.cpu_count() or 1) // getattr(cfg, "tp", 1))
    return None  # an offline CPU engine: the whole machine is its own


def resolve_model(model: str | None) -> str:
    """A model folder: the default model's, `model` itself, or a hub id already in the local cache."""
    if model is None:
        from .default_model import default_model_path
        return default_model_path()
    if os.path.isdir(model):
        return model
    from huggingface_hub import snapshot_download  # only what is already in the local hub cache
    try:
        return snapshot_download(model, local_files_only=True)
    except Exception as e:
        raise ValueError(f"model {model!r} is neither a folder nor in the local Hugging Face cache") from e


def load_tokenizer(path: str, warn: bool = True):
    """The folder's tokenizer, or None: a config-only folder (dummy weights) may have none, and ids still work."""
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:
        if warn:
            log.warning("no tokenizer in %s (%s): pass token ids", path, e)
        return None


def eos_ids(path: str, use_tokenizer: bool = True) -> tuple[int, ...]:
    """The folder's end-of-sequence ids: its generation config's, else its tokenizer's (unless told not to load it)."""
    ids = set()
    try:
        from transformers import GenerationConfig
        e = GenerationConfig.from_pretrained(path).eos_token_id
        ids.update(e if isinstance(e, list) else [e] if e is not None else [])
    except OSError:
        pass
    if not ids and use_tokenizer and (tok := load_tokenizer(path, warn=False)) is not None and tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    return tuple(ids)
