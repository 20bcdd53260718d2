"""Session 40: tests/gpu/test_llm_cuda.py's fixture (SmolLM2-135M, dummy weights, graphs up to 64) failed while
capturing a prefill graph on an H100, after 68 GPU tests had passed. Builds that LLM once a process under each switch
and prints OK or the error, to find which mechanism breaks the capture.

    python benchmarks/issue16/s40/capture_bisect.py all | defaults | NAME=VALUE ...   (all: every switch, one process each)
"""
import ast
import pathlib
import subprocess
import sys

SWITCHES = ["defaults", "qk_kernel=False", "skinny_gemm=False", "pdl=False", "gemv_kernel=False", "cuda_graph_max_extend=0",
            "fused_kernels=False", "warm_start=False"]

if len(sys.argv) > 1 and sys.argv[1] != "all":
    import traceback
    from minisgl_edu import LLM, SamplingParams
    kw = {k: ast.literal_eval(v) for k, v in (a.split("=") for a in sys.argv[1:] if a != "defaults")}
    root = pathlib.Path(__file__).resolve().parents[3]
    try:
        llm = LLM(str(root / "benchmarks/configs/smollm2-135m"), device="cuda", dummy_weights=True, cuda_graph_max_bs=64,
                  max_total_tokens=65536, **kw)
        outs = llm.generate(["What is the capital of France?", "Hello"], SamplingParams(max_tokens=8, ignore_eos=True),
                            use_tqdm=False)
        print("RESULT", kw, "OK", [len(o["token_ids"]) for o in outs])
    except Exception as e:
        traceback.print_exc(limit=-6)
        print("RESULT", kw, "FAIL", type(e).__name__, str(e).splitlines()[0][:200])
else:
    for s in SWITCHES:
        subprocess.run([sys.executable, __file__, s], timeout=120)
