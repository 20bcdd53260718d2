"""Session 10: why notebooks 03 and 05 fail their bitwise token checks on the H200. For each pair of runs that
should agree (chunked vs whole prefill; radix vs naive cache), record every step's logits and compare, per
request and output position, up to the first differing token: the logits' relative difference, and at a flip
the top-2 gap of each run (a near-tie, or a real error?). argv: device"""
import sys
import torch
from minisgl_edu import LLM, SamplingParams
from minisgl_edu.server.scheduler_proc import BatchRecorder

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"


def per_request(rec, plen):
    out = {}  # uid -> [logits row per output token]
    logits = iter(rec.logits)
    for r in rec.records:
        rows = next(logits) if r.tokens else None
        if rows is None:
            continue
        k = 0
        for uid, c, e in zip(r.uids, r.cached_lens, r.extend_lens):
            if c + e >= plen[uid]:  # sampled: its prompt is done
                out.setdefault(uid, []).append(rows[k]); k += 1
        assert k == len(rows), (k, len(rows))
    return out


def compare(name, a, b):
    worst = 0.0
    for ua, ub in zip(sorted(a), sorted(b)):
        for pos, (x, y) in enumerate(zip(a[ua], b[ub])):
            rel = ((x - y).norm() / y.norm()).item()
            worst = max(worst, rel)
            if x.argmax() != y.argmax():
                ta, tb = x.topk(2).values, y.topk(2).values
                print(f"  {name}: request {ua}/{ub} token {pos}: FLIP, logits rel diff {rel:.2e}; top-2 gap "
                      f"{(ta[0] - ta[1]).item():.4f} vs {(tb[0] - tb[1]).item():.4f} (logit units; max |logit| {y.abs().max().item():.1f})")
                break
    print(f"  {name}: worst logits rel diff before any flip {worst:.2e}")


def run_budget(llm, rec, prompts, budget, base):
    sched = llm.scheduler
    sched.max_prefill_tokens = budget
    rec.records, rec.logits = [], []
    reqs = [sched.add_request(base + i, p, SamplingParams(max_tokens=4, ignore_eos=True)) for i, p in enumerate(prompts)]
    while not sched.idle:
        b = sched.schedule()
        sched.process(b, sched.launch(b).tolist())
    return per_request(rec, {base + i: len(p) for i, p in enumerate(prompts)}), [r.output_ids for r in reqs]


llm = LLM(device=dev, max_total_tokens=256, cache="naive", max_prefill_tokens=32, overlap=False)
tok = llm.tokenizer
rec = BatchRecorder(llm.engine, keep_logits=True)
long_prompt = tok.encode("The history of computing is a story of layers: each generation builds on the last. " * 9)[:150]
prompts = [long_prompt, tok.encode("The capital of France is"), tok.encode("One, two, three, four,")]
whole, tw = run_budget(llm, rec, prompts, 8192, 1000)
for budget in (32, 48):
    got, tg = run_budget(llm, rec, prompts, budget, 2000 + budget)
    print(f"notebook 03, budget {budget} vs whole: tokens equal {tg == tw}")
    compare(f"budget {budget}", got, whole)
rec.detach()

tok2 = llm.tokenizer
system = tok2.encode("You are a careful assistant who answers in one short sentence. " * 10)[:100]
questions = ["What is the capital of France?", "Name a primary colour.", "What is two plus two?",
             "Which planet is largest?", "What do bees make?", "What is frozen water called?"]
p5 = [system + tok2.encode(q) for q in questions]
res = {}
for kind in ("radix", "naive"):
    l5 = LLM(device=dev, cache=kind)
    r5 = BatchRecorder(l5.engine, keep_logits=True)
    sp = SamplingParams(max_tokens=4, ignore_eos=True)
    outs = l5.generate(p5[:1], sp, use_tqdm=False) + l5.generate(p5[1:], sp, use_tqdm=False)
    plen = {}
    for r in r5.records:  # uids are the LLM's own: map them by first appearance to prompt order
        for u in r.uids:
            plen.setdefault(u, None)
    uids = list(plen)
    plen = {u: len(p5[i]) for i, u in enumerate(uids)}
    res[kind] = (per_request(r5, plen), [o["token_ids"] for o in outs])
    r5.detach()
    del l5
print(f"notebook 05, radix vs naive: tokens equal {res['radix'][1] == res['naive'][1]}")
compare("radix vs naive", res["radix"][0], res["naive"][0])
