"""Which steps make the ITL tail: token-weighted emit intervals (process end to process end, weighted by decode rows),
each labelled by the phase of the step whose tokens end it and of the step launched just before those tokens were
processed (its host launch sits inside the interval).

    python tail.py TRACE.json [THRESHOLD_MS] [--dump OUT.json]   (--dump: every interval as [ms, tokens, label], for
                                                                  scripts/draw_diagrams.py's chapter-9 figure)"""
import collections, json, os, sys
import numpy as np
argv = sys.argv[1:]
dump = argv.pop(argv.index("--dump") + 1) if "--dump" in argv else None
argv = [a for a in argv if a != "--dump"]
t = json.load(open(argv[0])); thr = float(argv[1]) if len(argv) > 1 else 2.8
ev = t['traceEvents'] if isinstance(t, dict) else t
steps = collections.defaultdict(dict)
for e in ev:
    if e.get('ph') == 'X' and 'step' in e.get('args', {}):
        steps[e['args']['step']][e['name']] = e
ids = sorted(s for s in steps if all(k in steps[s] for k in ('schedule', 'launch', 'forward', 'process')))
P = {s: steps[s] for s in ids}
iv, w, lab, info = [], [], [], []
for a, b in zip(ids, ids[1:]):
    if b != a + 1 or b + 1 not in P: continue
    d = P[b]; n = d['process']['args'].get('decode_rows', 0) if d['launch']['args']['phase'] != 'prefill' else 0
    x = (d['process']['ts'] + d['process']['dur'] - P[a]['process']['ts'] - P[a]['process']['dur']) / 1e3
    if n == 0 or x > 50: continue
    nxt = P[b + 1]
    iv.append(x); w.append(n)
    lab.append(f"{d['launch']['args']['phase']}/next {nxt['launch']['args']['phase']}")
    info.append((x, d['launch']['args']['phase'], d['launch']['args']['batch_size'], d['launch']['args']['tokens'],
                 d['forward']['dur'] / 1e3, nxt['schedule']['dur'] / 1e3, nxt['launch']['dur'] / 1e3, nxt['launch']['args']['phase'],
                 d['process']['dur'] / 1e3))
iv, w = np.array(iv), np.array(w, float)
o = np.argsort(iv); c = np.cumsum(w[o]) / w.sum()
q = lambda p: iv[o][np.searchsorted(c, p)]
dec = [x[4] for x in info if x[1] == 'decode']
print(f"intervals {len(iv)}; token-weighted p50 {q(.5):.3f} p90 {q(.9):.3f} p99 {q(.99):.3f}; median decode forward span {np.median(dec):.3f}")
tot = collections.Counter(); big = collections.Counter()
for x, ww, l in zip(iv, w, lab):
    tot[l] += ww
    if x > thr: big[l] += ww
print(f"token weight above {thr} ms: {sum(big.values()) / w.sum():.2%} of all")
for l in sorted(tot, key=lambda l: -big[l]):
    print(f"  {l:24s} share of all {tot[l] / w.sum():6.2%}  above {thr}: {big[l] / w.sum():6.2%}  (of its own {big[l] / tot[l]:6.1%})")
print("largest 30: interval | this phase bs tok fwd-span | next sched launch phase | process")
for x in sorted(info, key=lambda x: -x[0])[:30]:
    print("  %6.3f | %-7s bs %3d tok %5d fwd %6.3f | next sched %.3f launch %.3f %-7s | proc %.3f" % x)
if dump:
    json.dump({"source": os.path.basename(argv[0]), "median_decode_forward_ms": round(float(np.median(dec)), 4),
               "intervals": [[round(float(x), 4), int(ww), l] for x, ww, l in zip(iv, w, lab)]}, open(dump, "w"))
