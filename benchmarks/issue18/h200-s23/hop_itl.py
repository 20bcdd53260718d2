"""Session 23: the ITL at every hop of a token's way back (chapter 1's hop log), to place the served tail.

    python hop_itl.py HOPS.jsonl

For each request, the k-th line of each hop event is its k-th token there (a TokenColumns stays one ReplyColumns,
and the API expands it row by row). Printed: per hop, the token-weighted ITL p50/p90/p99 (each token since its own
request's previous token at that hop) and the latency from the scheduler's send, p50/p99."""
import collections, json, sys
import numpy as np

HOPS = [("scheduler-rank0", "send DetokenizeMsg"), ("detokenizer", "recv DetokenizeMsg"),
        ("detokenizer", "send UserReply"), ("api", "recv UserReply")]
times = {h: collections.defaultdict(list) for h in HOPS}
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    h = (e["proc"], e["event"])
    if h in times:
        times[h][e["uid"]].append(e["t"])
uids = set.intersection(*(set(times[h]) for h in HOPS))
itl = {h: [] for h in HOPS}
lat = {h: [] for h in HOPS}
skipped = 0
for u in uids:
    seqs = [times[h][u] for h in HOPS]
    n = min(len(s) for s in seqs)
    skipped += sum(len(s) - n for s in seqs)
    for h, s in zip(HOPS, seqs):
        a = np.array(s[:n]) * 1e3
        itl[h].extend(np.diff(a)[1:])  # from the second decode token on: the first interval follows the prefill
        lat[h].extend(a[1:] - np.array(seqs[0][1:n]) * 1e3)
print(f"requests {len(uids)}; lines past a common count {skipped}")
for h in HOPS:
    x, y = np.array(itl[h]), np.array(lat[h])
    print(f"{h[0]:>16} {h[1]:<20} ITL p50/p90/p99/p99.9 {np.percentile(x, 50):6.3f} {np.percentile(x, 90):6.3f} "
          f"{np.percentile(x, 99):6.3f} {np.percentile(x, 99.9):6.3f} ms   after the send p50/p99 "
          f"{np.percentile(y, 50):6.3f} {np.percentile(y, 99):6.3f} ms")
