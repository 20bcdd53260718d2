import json, sys, numpy as np
t = json.load(open(sys.argv[1]))
ev = t['traceEvents'] if isinstance(t, dict) else t
cpu = sorted([e for e in ev if e.get('ph') == 'X' and e['tid'] == 1], key=lambda e: e['ts'])
# attach to each launch the messages of the receive before it
last_m = 0; rows = []
for e in cpu:
    if e['name'] == 'receive': last_m = e['args'].get('messages', 0)
    if e['name'] == 'launch':
        rows.append((e['args']['step'], e['args']['phase'], e['args']['batch_size'], e['dur']/1e3, last_m)); last_m = 0
L = np.array([r[3] for r in rows]); M = np.array([r[4] for r in rows]); P = np.array([r[1] for r in rows])
for ph in ('decode', 'mixed'):
    for m in (0, 1):
        sel = (P == ph) & ((M > 0) if m else (M == 0))
        if sel.sum():
            print(ph, 'msgs>0' if m else 'msgs=0', sel.sum(), 'launch p50 %.3f p90 %.3f p99 %.3f max %.3f' % (*np.percentile(L[sel], [50, 90, 99]), L[sel].max()))
big = [i for i, r in enumerate(rows) if r[3] > 2.5]
for i in big[:20]:
    print([f"{rows[j][1][:3]}{rows[j][2]} L{rows[j][3]:.2f} m{rows[j][4]}" for j in range(max(0, i-2), min(len(rows), i+3))])
