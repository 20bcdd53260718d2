"""Session 38's CUTLASS probe into benchmarks/results.json: lt_probe.py --cutlass's layer rows (the best variant of
each product, four in a row, against torch) and each product's best variant.

    python benchmarks/issue16/s38/rows.py CALL_DIR HARDWARE COMMIT DATE
"""
import json
import pathlib
import sys

call, hardware, commit, date = sys.argv[1:5]
results = pathlib.Path(__file__).resolve().parents[2] / "results.json"
rows = json.loads(results.read_text())
base = dict(hardware=hardware, date=date, commit=commit, command="python benchmarks/lt_probe.py --cutlass --pm 32,64,128,256")
for r in json.loads((pathlib.Path(call) / "cutlass.json").read_text())["cutlass"]:
    if r["gemm"] == "layer":
        rows.append(dict(metric=f"s38_cutlass_layer_m{r['m']}_us", value=round(r["pdl_us"], 3), unit="us",
                         ratio=round(r["pdl_us"] / r["torch_us"], 3), **base,
                         note=f"cutlass_swap_ab.cu, best variant of each of the four products ({', '.join(f'{k} {v}' for k, v in r['best'].items())}), "
                              f"four in a row over 28 layers' weights in a CUDA graph, PDL on; torch {r['torch_us']:.2f} us, "
                              f"PDL off {r['plain_us']:.2f}; ratio = ours / torch"))
    elif r["best"]:
        b = r["best"]
        rows.append(dict(metric=f"s38_cutlass_{r['gemm']}_m{r['m']}_us", value=round(b["us_pdl"], 3), unit="us",
                         ratio=round(b["us_pdl"] / r["torch_us"], 3), **base,
                         note=f"cutlass_swap_ab.cu's fastest correct variant {b['variant']}, PDL on (off {b['us']:.2f} us), "
                              f"over 28 layers' weights in a CUDA graph; torch {r['torch_us']:.2f} us; rel. err. {b['err']:.1e}; "
                              f"{sum(1 for c in r['configs'] if c['err'] < 2e-2 and c['repeat_equal'])} of {len(r['configs'])} "
                              "variants correct; ratio = ours / torch"))
results.write_text(json.dumps(rows, indent=1) + "\n")
print(f"{len(rows)} rows in {results}")
