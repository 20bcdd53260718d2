"""Where does a served token's CPU time go? py-spy on every process of a running server under load (chapter 9).

    python benchmarks/profile_serve.py OUT_DIR [--pythonpath OTHER_CHECKOUT] [bench serve flags ...]

Starts `python -m minisgl_edu.serve` (from OTHER_CHECKOUT when given: before/after), finds its scheduler,
tokenizer, detokenizer and API (launcher) processes through /health, runs `python -m minisgl_edu.bench serve`
against it while `py-spy record --format raw` samples each process, and prints, per process, how many
samples it was on the CPU, its CPU time per output token (psutil: user + system, which a busy machine
inflates far less than wall time) and its top functions (own time). Needs `pip install py-spy`.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def top_functions(raw_path: str, n: int = 8) -> tuple[int, list[tuple[str, int]]]:
    """(samples, [(leaf function, samples)]) from a py-spy raw (collapsed stacks) file."""
    leaves, total = collections.Counter(), 0
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            total += int(count)
            leaves[stack.split(";")[-1].split(" (")[0]] += int(count)
    return total, leaves.most_common(n)


def main(argv: list[str]) -> int:
    out_dir, rest = argv[0], argv[1:]
    pythonpath = None
    if rest[:1] == ["--pythonpath"]:
        pythonpath, rest = rest[1], rest[2:]
    os.makedirs(out_dir, exist_ok=True)
    sys.path.insert(0, HERE)
    from minisgl_edu.bench_serve import start_server, stop_server
    from minisgl_edu.default_model import default_model_path
    proc, url = start_server(default_model_path(), "cpu", False, [], os.path.join(out_dir, "serve.log"),
                             pythonpath=pythonpath)
    spies = []
    try:
        import httpx
        import psutil
        workers = httpx.get(url + "/health", timeout=10).json()["workers"] | {"api": proc.pid}
        cpu0 = {name: sum(psutil.Process(pid).cpu_times()[:2]) for name, pid in workers.items()}
        bench = subprocess.Popen([sys.executable, "-m", "minisgl_edu.bench", "serve", "--base-url", url,
                                  "--no-progress", "--out", os.path.join(out_dir, "bench.json"), *rest], cwd=HERE)
        time.sleep(1.0)  # past the warm-up requests
        for name, pid in workers.items():
            path = os.path.join(out_dir, f"{name}.txt")
            spies.append((name, path, subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", path, "--rate", "200",
                 "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        bench.wait()
        cpu = {name: sum(psutil.Process(pid).cpu_times()[:2]) - cpu0[name] for name, pid in workers.items()}
    finally:
        for _, _, spy in spies:
            spy.send_signal(2)  # SIGINT: py-spy writes its file and exits
        for _, _, spy in spies:
            spy.wait(30)
        stop_server(proc)
    with open(os.path.join(out_dir, "bench.json")) as f:
        tokens = json.load(f)["total_output_tokens"]
    report = {"output_tokens": tokens}
    for name, path, _ in spies:
        total, top = top_functions(path) if os.path.exists(path) else (0, [])
        report[name] = {"samples": total, "cpu_s": cpu[name], "cpu_ms_per_token": 1e3 * cpu[name] / tokens, "top": top}
        print(f"{name:16s} {1e3 * cpu[name] / tokens:8.3f} CPU ms/token {total:6d} samples: "
              + ", ".join(f"{fn} {c}" for fn, c in top[:5]))
    with open(os.path.join(out_dir, "profile.json"), "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
