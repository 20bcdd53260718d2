import json, sys, numpy as np, collections
t = json.load(open(sys.argv[1]))
ev = t['traceEvents'] if isinstance(t, dict) else t
ev = [e for e in ev if e.get('ph') == 'X']
steps = collections.defaultdict(dict)
for e in ev:
    if 'step' in e.get('args', {}):
        steps[e['args']['step']][e['name']] = e
ids = sorted(s for s in steps if all(k in steps[s] for k in ('schedule', 'launch', 'forward', 'process')))
rows = []
for s in ids:
    d = steps[s]
    ph = d['launch']['args']['phase']
    sched = d['schedule']['dur'] / 1e3
    launch = d['launch']['dur'] / 1e3
    fwd = d['forward']['dur'] / 1e3
    fstart = d['forward']['ts']
    pend = (d['process']['ts'] + d['process']['dur'])
    rows.append((s, ph, d['launch']['args']['batch_size'], d['launch']['args']['tokens'], sched, launch, fwd, fstart, pend, d['schedule']['ts']))
# device gap before each step and emit interval (process end to next process end)
out = collections.defaultdict(list)
for i in range(1, len(rows)):
    s, ph, bs, tok, sched, launch, fwd, fstart, pend, sts = rows[i]
    p = rows[i - 1]
    gap = (fstart - (p[7] + p[6] * 1e3)) / 1e3  # device idle before this forward
    emit = (pend - p[8]) / 1e3
    out[ph].append((sched, launch, fwd, gap, emit, bs, tok))
for ph, v in out.items():
    a = np.array([x[:5] for x in v])
    print(f"{ph:8s} n={len(v):5d}  median sched {np.median(a[:,0]):.3f} launch {np.median(a[:,1]):.3f} device {np.median(a[:,2]):.3f} "
          f"gap-before {np.median(a[:,3]):.3f} emit-interval {np.median(a[:,4]):.3f} | p90 device {np.percentile(a[:,2],90):.3f} emit {np.percentile(a[:,4],90):.3f}")
# all emit intervals (decode + mixed), weighting by decode rows ~ ITL per token
allv = [(x[4], x[5], ph) for ph, v in out.items() for x in v]
# the intervals following each step: which phase is the step whose tokens come at the end of the big intervals
em = np.array([x[0] for x in allv])
print("emit p50 %.3f p90 %.3f p99 %.3f" % tuple(np.percentile(em, [50, 90, 99])))
big = sorted(range(len(rows)-1), key=lambda i: -(rows[i+1][8]-rows[i][8]))[:25]
print("largest emit intervals: (this step phase, bs, tok, sched, launch, device, gap-before | prev phase)")
for i in big:
    s, ph, bs, tok, sched, launch, fwd, fstart, pend, sts = rows[i+1]
    p = rows[i]
    gap = (fstart - (p[7] + p[6] * 1e3)) / 1e3
    print(f"  {(pend-p[8])/1e3:6.3f}  {ph:7s} bs {bs:3d} tok {tok:5d} sched {sched:.3f} launch {launch:.3f} dev {fwd:.3f} gap {gap:.3f} | prev {p[1]} dev {p[6]:.3f}")
