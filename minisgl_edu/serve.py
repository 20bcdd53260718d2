"""Chapter 9 — the full server: `python -m minisgl_edu.serve [--shell] [--tp N] ...`.

It starts the scheduler rank(s), the tokenizer(s) and the detokenizer, waits for each to be ready,
then serves the OpenAI-compatible API (`server/api.py`) until Ctrl-C / SIGTERM or a worker dies (exit 1).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from .config import ServerConfig, resolve_model

log = logging.getLogger("minisgl_edu")


def parse_args(argv=None) -> tuple[ServerConfig, bool]:
    """The flags are `ServerConfig`'s fields (dashes for underscores); a flag not given keeps the field's default."""
    ap = argparse.ArgumentParser(prog="python -m minisgl_edu.serve", description=__doc__.split("\n")[0],
                                 argument_default=argparse.SUPPRESS)  # unset flags stay out: the defaults live in config.py
    ap.add_argument("--model", default=None, help="a model folder or a Hugging Face id in the local cache "
                                                  "(default: SmolLM2-135M-Instruct)")
    ap.add_argument("--served-model-name", dest="served_name", help="the name clients use (default: the folder name)")
    ap.add_argument("--host")
    ap.add_argument("--port", type=int)
    ap.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--tp", type=int, help="tensor-parallel ranks (one scheduler process each)")
    ap.add_argument("--page-size", type=int)
    ap.add_argument("--max-prefill-tokens", type=int, help="the token budget of one prefill step")
    ap.add_argument("--cache", choices=["radix", "naive"])
    ap.add_argument("--attention", choices=["reference", "flashinfer"], help="default: flashinfer on CUDA")
    ap.add_argument("--cuda-graph-max-bs", type=int)
    ap.add_argument("--overlap", action=argparse.BooleanOptionalAction,
                    help="the overlap loop (default: on with CUDA); --no-overlap: the normal loop on CUDA too")
    ap.add_argument("--no-mixed-chunk", dest="mixed_chunk", action="store_false",
                    help="prefill steps alone, decodes wait (default on CUDA: decode rows ride in every prefill step)")
    ap.add_argument("--mixed-prefill-tokens", type=int, help="the token budget of a prefill step decode rows ride in "
                                                               "(default on CUDA: by the model's size; Qwen3-0.6B 509)")
    ap.add_argument("--mixed-backlog-tokens", type=int,
                    help="the mixed budget holds while at most this many prompt tokens wait (default 4096); a longer "
                         "queue gets the full one")
    ap.add_argument("--no-graph-head", dest="graph_head", action="store_false",
                    help="launch the LM head and the greedy argmax after each decode graph's replay, not inside it")
    ap.add_argument("--cuda-graph-max-extend", type=int, help="prefill tokens a captured prefill-step graph holds (0: eager)")
    ap.add_argument("--no-fused-kernels", dest="fused_kernels", action="store_false",
                    help="plain PyTorch ops instead of FlashInfer's fused RMSNorm/RoPE/SiLU-and-mul on CUDA")
    ap.add_argument("--no-qk-kernel", dest="qk_kernel", action="store_false",
                    help="FlashInfer's q/k norm + RoPE kernels instead of our one-launch kernel")
    ap.add_argument("--no-gemv-kernel", dest="gemv_kernel", action="store_false",
                    help="cuBLAS for a one-row decode step's products instead of our GEMV")
    ap.add_argument("--no-pdl", dest="pdl", action="store_false",
                    help="launch our GEMVs plainly, not with programmatic dependent launch (weights loaded early)")
    ap.add_argument("--no-skinny-gemm", dest="skinny_gemm", action="store_false",
                    help="cuBLAS for the products of 2-16 rows instead of our tensor-core GEMM (chapter 7)")
    ap.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                    help="serve without first replaying every CUDA graph and running the LM head at every row count "
                         "(each one's first use then stalls a step by ms)")
    ap.add_argument("--moe-impl", choices=["reference", "grouped"], help="MoE experts (default: grouped on CUDA)")
    ap.add_argument("--dummy-weights", action="store_true", help="random weights from the config (benchmarks)")
    ap.add_argument("--max-running-reqs", type=int)
    ap.add_argument("--host-threads", type=int, help="torch CPU threads per scheduler rank (default: 4 on CUDA)")
    ap.add_argument("--max-total-tokens", type=int, help="KV pool size in tokens")
    ap.add_argument("--max-seq-len", "--context-length", dest="max_seq_len", type=int, help="cap the model's context")
    ap.add_argument("--num-tokenizers", type=int)
    ap.add_argument("--api-key", default=os.environ.get("MINISGL_API_KEY"),
                    help="require Authorization: Bearer KEY on /v1 (default: $MINISGL_API_KEY)")
    ap.add_argument("--shell", action="store_true", default=False, help="an interactive chat in this terminal, no HTTP")
    ap.add_argument("--trace", help="write a Chrome/Perfetto step trace (scheduler rank 0) to this file at shutdown")
    ap.add_argument("--hop-log", help="append one JSON line per message hop to this file")
    ap.add_argument("--exercises", help="serve with your build exercises from this folder swapped in "
                                        "(every process; see python -m minisgl_edu.exercises)")
    ap.add_argument("--skip-tokenizer-init", action="store_true",
                    help="load no tokenizer: prompts are token ids (/v1/completions), replies carry token_ids")
    ap.add_argument("--http-parser", choices=["httptools", "h11"],
                    help="uvicorn's HTTP parser (default: httptools when installed; h11: the pure-Python twin)")
    ap.add_argument("--no-early-receive", dest="early_receive", action="store_false",
                    help="read requests only at the top of the scheduler loop, not while a step's tokens travel")
    ap.add_argument("--early-admit", action=argparse.BooleanOptionalAction,
                    help="admit the next step's requests while a step's tokens travel (default off: measured no gain)")
    ap.add_argument("--gc-threshold", type=int, help="collect a server process's youngest objects after this many "
                                                     "net new ones (default 10000; 700: Python's own)")
    ap.add_argument("--no-direct-write", dest="direct_write", action="store_false",
                    help="write every SSE event from its request's own task (the twin of the direct writes)")
    ap.add_argument("--no-reply-socket", dest="reply_socket", action="store_false",
                    help="send the replies (scheduler -> detokenizer -> API) over ZMQ, as the requests go, not plain sockets")
    ap.add_argument("--naive-stream", action="store_true",
                    help="the per-token twins of the streaming path (one decode and one SSE event per token)")
    kw = vars(ap.parse_args(argv))
    if folder := kw.pop("exercises", None):  # the build path's capstone: $MINISGL_EXERCISES reaches every child process
        from .exercises.swap import use_folder
        log.info("exercises swapped in: %s", ", ".join(use_folder(folder)) or "none (all stubs)")
    from .model import check_tp, load_config
    shell = kw.pop("shell")
    cfg = ServerConfig(model_path=resolve_model(kw.pop("model")), **kw)
    check_tp(load_config(cfg.model_path), cfg.tp)  # refuse a split the model cannot take before any process starts
    return cfg, shell


def main(argv=None) -> int:
    logging.basicConfig(level=os.environ.get("MINISGL_LOG", "INFO"), format="%(asctime)s [launcher] %(message)s")
    try:
        cfg, shell = parse_args(argv)
    except ValueError as e:  # e.g. a model that is neither a folder nor in the local cache
        print(f"error: {e}", file=sys.stderr)
        return 2

    def on_term(signum, frame):  # SIGTERM unwinds like Ctrl-C, so the `finally` blocks stop the children
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, on_term)
    from .server.launcher import StartupError, serve_http, start_workers, stop_workers
    try:
        if not shell:
            return serve_http(cfg)
        from .server.shell import run_shell
        workers = start_workers(cfg)
        try:
            run_shell(cfg, workers)
        finally:
            stop_workers(workers)
        return 0
    except StartupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the `finally` blocks have stopped the children
        return 0
    except SystemExit as e:  # SIGTERM (code 0), or uvicorn could not bind the port (code 1)
        return e.code if isinstance(e.code, int) else 1


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # every child is stopped; skip library finalizers that can stall exit for seconds
