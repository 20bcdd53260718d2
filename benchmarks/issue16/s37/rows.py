"""Session 37's probe results into benchmarks/results.json: lt_probe.py --pipe's layer rows (the best configuration of
each product, four in a row, against torch) and --skinny's per-product times of each G/A variant at the model's K
slice.

    python benchmarks/issue16/s37/rows.py CALL_DIR HARDWARE COMMIT DATE
"""
import json
import pathlib
import sys

call, hardware, commit, date = sys.argv[1:5]
results = pathlib.Path(__file__).resolve().parents[2] / "results.json"
rows = json.loads(results.read_text())
base = dict(hardware=hardware, date=date, commit=commit)
pipe = json.loads((pathlib.Path(call) / "pipe.json").read_text())["pipe"]
for r in pipe:
    if r["gemm"] == "layer":
        rows.append(dict(metric=f"s37_pipe_layer_m{r['m']}_us", value=round(r["pdl_us"], 3), unit="us",
                         ratio=round(r["pdl_us"] / r["torch_us"], 3), **base,
                         command="python benchmarks/lt_probe.py --pipe",
                         note=f"pipe_gemm.cu, best configuration of each of the four products ({', '.join(f'{k} {v}' for k, v in r['best'].items())}), "
                              f"four in a row over 28 layers' weights in a CUDA graph, PDL on; torch {r['torch_us']:.2f} us, "
                              f"PDL off {r['plain_us']:.2f}; ratio = ours / torch"))
J = {"qkv": 32, "gate_up": 32, "o_proj": 16, "down": 32}  # the model's K slice (qk_kernel.skinny_j)
for r in json.loads((pathlib.Path(call) / "skinny.json").read_text())["skinny"]:
    if r["gemm"] == "layer":
        continue
    for c in r["configs"]:
        if c["j"] == J[r["gemm"]] and c["nt"] == 1 and c["warps"] == 8:
            rows.append(dict(metric=f"s37_skinny_{r['gemm']}_m{r['m']}_g{c['g']}_a{c['a']}_us", value=round(c["us_pdl"], 3),
                             unit="us", ratio=round(c["us_pdl"] / r["torch_us"], 3), **base,
                             command="python benchmarks/lt_probe.py --skinny --sm 2,16,32,64 --skinny-kinds n,p",
                             note=f"skinny_gemm.cu, x copied in {c['g']} groups, {c['a']} accumulator chains, J {c['j']}, "
                                  f"PDL on, over 28 layers' weights in a CUDA graph; torch {r['torch_us']:.2f} us; "
                                  f"rel. err. {c['err']:.1e}; ratio = ours / torch"))
results.write_text(json.dumps(rows, indent=1) + "\n")
print(f"{len(rows)} rows in {results}")
