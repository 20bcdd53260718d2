import json, sys, numpy as np
t = json.load(open(sys.argv[1]))
ev = t['traceEvents'] if isinstance(t, dict) else t
cpu = sorted([e for e in ev if e.get('ph') == 'X' and e['tid'] == 1 and e['name'] in ('process', 'launch')], key=lambda e: e['ts'])
proc = [e for e in cpu if e['name'] == 'process']
launch = {e['args']['step']: e for e in cpu if e['name'] == 'launch'}
iv, w, slow = [], [], []
for i in range(1, len(proc)):
    d = (proc[i]['ts'] + proc[i]['dur'] - proc[i-1]['ts'] - proc[i-1]['dur']) / 1e3
    a = proc[i]['args']
    n = a['decode_rows'] if a['phase'] != 'prefill' else 0
    if n == 0 or d > 50: continue
    iv.append(d); w.append(n)
    # the interval ending with step s's tokens spans launch of s+1 (host) — mark if launch of s or s+1 was slow
    s = a['step']
    slow.append(any(launch.get(k) is not None and launch[k]['dur'] > 4e3 for k in (s, s + 1)))
iv, w, slow = np.array(iv), np.array(w), np.array(slow)
def wq(x, ww, q):
    o = np.argsort(x); c = np.cumsum(ww[o]) / ww.sum(); return x[o][np.searchsorted(c, q)]
print("token-weighted emit interval p50 %.3f p90 %.3f p99 %.3f" % tuple(wq(iv, w, q) for q in (.5, .9, .99)))
m = ~slow
print("without the first-use stalls: p50 %.3f p90 %.3f p99 %.3f (removed %d intervals)" % (*(wq(iv[m], w[m], q) for q in (.5, .9, .99)), slow.sum()))
