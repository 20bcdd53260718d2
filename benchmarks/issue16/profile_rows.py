"""profile_decode.py's JSON lines into benchmarks/results.json rows, named PREFIX_TAG_bsN_... (sessions 35-37).

    python benchmarks/issue16/profile_rows.py PREFIX PROFILE.jsonl HARDWARE COMMIT DATE COMMAND
"""
import json
import pathlib
import sys

TAGS = {  # what each profiled tag ran; others: see RESULTS.md, the session's section
    "skinny_on": "skinny_on: our 2-16-row tensor-core GEMM (skinny_gemm.cu)", "skinny_off": "skinny_off: cuBLAS",
    "base": "base: the model as it is", "pipe": "pipe: profile_decode.py --pipe (pipe_gemm.cu where it beat torch)",
    "ga1,1": "ga1,1: skinny_gemm.cu's variant 1,1 (the model's)",
    "ga4,1": "ga4,1: skinny_gemm.cu's variant 4,1 (x copied in 4 groups)",
    "cutlass": "cutlass: profile_decode.py --cutlass (cutlass_swap_ab.cu where it beat torch)"}
prefix, path, hardware, commit, date, command = sys.argv[1:7]
results = pathlib.Path(__file__).resolve().parents[1] / "results.json"
rows = json.loads(results.read_text())
seen: dict[tuple[str, int], int] = {}
for line in open(path):
    d = json.loads(line)
    run = seen[d["tag"], d["bs"]] = seen.get((d["tag"], d["bs"]), 0) + 1
    for key, what in (("step_graph_ms", "graph step"), ("replay_ms", "graph replay alone"), ("step_eager_ms", "eager step")):
        rows.append(dict(metric=f"{prefix}_{d['tag']}_bs{d['bs']}_{key}_run{run}", value=round(d[key], 4), unit="ms", ratio=None,
                         hardware=hardware, date=date, commit=commit, command=command,
                         note=f"{what}, batch {d['bs']}, context 1,024, Qwen3-0.6B dummy weights; {TAGS.get(d['tag'], d['tag'])}; "
                              f"{d['eager_ops']} GPU ops an eager step"))
results.write_text(json.dumps(rows, indent=1) + "\n")
print(f"{sum(seen.values())} profiles -> {results}")
