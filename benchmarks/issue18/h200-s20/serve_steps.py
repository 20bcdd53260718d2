import sys, time, json, asyncio, argparse
from minisgl_edu import bench_serve as bs
from minisgl_edu.default_model import default_model_path
proc, url = bs.start_server(str(default_model_path()), "cpu", False, sys.argv[1:] + ["--trace", "/tmp/serve_trace.json"], "/tmp/steps_serve.log")
try:
    for seed in (0,):
        a = bs.parse_args(["serve", "--base-url", url, "--num-prompts", "16", "--input-len", "32", "128", "--output-len", "32", "64",
                           "--seed", str(seed), "--no-progress"])
        before = bs.step_totals(url)
        s = bs.bench_serve(a)
        after = bs.step_totals(url)
        print("seed", seed, "serve tok/s", round(s["output_throughput"], 1), "duration", round(s["duration_s"], 2),
              {p: (int(after[p][1] - before.get(p, (0, 0, []))[1]), round(1e3 * (after[p][0] - before.get(p, (0, 0, []))[0]) / max(1, after[p][1] - before.get(p, (0, 0, []))[1]), 1)) for p in after},
              "ttft p50/max", round(s["ttft_ms"]["median"]), round(s["ttft_ms"].get("max", s["ttft_ms"]["p99"])), flush=True)
finally:
    bs.stop_server(proc)
