import json, sys
t = json.load(open(sys.argv[1]))
ev = t['traceEvents'] if isinstance(t, dict) else t
dev = {e['args']['step']: e['dur']/1e3 for e in ev if e.get('name') == 'forward'}
seen_bs = set()
for e in sorted([e for e in ev if e.get('name') == 'launch'], key=lambda e: e['ts']):
    a = e['args']
    if a['phase'] == 'decode':
        if a['batch_size'] not in seen_bs: print(f"   first decode bs {a['batch_size']}: L {e['dur']/1e3:.2f}")
        seen_bs.add(a['batch_size']); continue
    flag = "  <== SLOW" if e['dur'] > 4e3 else ""
    print(f"step {a['step']:5d} {a['phase']} bs {a['batch_size']:3d} rows {a['decode_rows']:3d} tok {a['tokens']:5d} L {e['dur']/1e3:6.2f} dev {dev.get(a['step'],0):6.2f}{flag}")
