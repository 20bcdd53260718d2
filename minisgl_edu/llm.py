"""The offline API: the scheduler in this process (tp=1; `LLM(tp=N)`: the server's scheduler rank
processes, `RankGroup`), no HTTP. `LLM(trace="steps.json")` writes a Perfetto step trace (chapter 6).

    llm = LLM()                                   # the default model, device picked automatically
    out = llm.generate(["The capital of France is"], SamplingParams(max_tokens=16))
    out[0]["text"], out[0]["token_ids"]           # the generated part only; chat=True: the chat template
"""
from __future__ import annotations

import itertools
import logging
import time
import warnings
import weakref

import torch

from .config import SchedulerConfig, load_tokenizer, resolve_model
from .messages import (AbortMsg, BatchBackendMsg, BatchRecord, DetokenizeMsg, RankReport, RecordMsg, ReportMsg,
                       UserMsg, unbatch)
from .model import check_tp, load_config
from .req import SamplingParams
from .scheduler import build_scheduler
from .server.launcher import StartupError, refuse_unguarded_main, start_workers, stop_workers
from .server.queues import pull, push

log = logging.getLogger("minisgl_edu")


class RankFailed(RuntimeError):
    """A rank of `LLM(tp>1)` raised, died, or went silent: the message names it (with its traceback)."""


class RankGroup:
    """`LLM(tp=N)`'s ranks: the server's scheduler rank processes, with this process in the tokenizer's and
    the detokenizer's place. Every wait has a limit and checks the ranks: a dead or stuck one raises `RankFailed`."""

    def __init__(self, cfg: SchedulerConfig):
        self.size, self.timeout_s = cfg.tp, cfg.tp_timeout_s
        self.live_steps: list[tuple[int, object]] = []  # (rank, BatchRecord) as the ranks started them
        try:
            self.workers = start_workers(cfg, frontend=False)
        except StartupError as e:
            raise RankFailed(str(e)) from None
        self.to_rank0, self.replies = push(self.workers.addrs.scheduler), pull(self.workers.addrs.detokenizer)
        self._finalizer = weakref.finalize(self, self._stop, self.workers, self.to_rank0, self.replies)

    @staticmethod
    def _stop(workers, *sockets) -> None:
        stop_workers(workers, graceful=workers.dead() is None)
        for q in sockets:
            q.close()

    @property
    def procs(self):
        return self.workers.procs

    @property
    def alive(self) -> bool:
        return any(p.is_alive() for p in self.procs)

    def publish(self, msg) -> None:
        """One message into rank 0's mailbox: every rank will apply it in the same step."""
        self.to_rank0.put(msg)

    def next_replies(self, timeout_s: float | None = None) -> list:
        """The next replies (live BatchRecords go to `live_steps`); RankFailed if a rank failed, died, or
        nothing came in time (a backstop: a stuck collective raises inside the ranks after `tp_timeout_s`)."""
        timeout_s = timeout_s or self.timeout_s + 60
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self.replies.get(timeout_ms=200)
            if msg is None:
                self._check(deadline, timeout_s)
                continue
            out = [m for m in unbatch(msg) if not isinstance(m, BatchRecord)]
            self.live_steps += [(m.rank, m) for m in unbatch(msg) if isinstance(m, BatchRecord)]
            if out:
                return out

    def _check(self, deadline: float, timeout_s: float) -> None:
        ack, rank = self.workers.ack, lambda name: name.removeprefix("scheduler-rank")
        errors = list(iter(lambda: ack.get(timeout_ms=0), None))
        if errors:  # a collective failing on one rank usually fails the others too: gather them
            errors += iter(lambda: ack.get(timeout_ms=2000), None)
        dead = [p for p in self.procs if p.exitcode is not None and p.name not in {m.name for m in errors}]
        if errors or dead:
            self._fail("; ".join([f"rank {rank(p.name)} exited with code {p.exitcode}" for p in dead] +
                                 [f"rank {rank(m.name)} failed:\n{m.error}" for m in errors]))
        if time.monotonic() > deadline:
            self._fail(f"no reply from the ranks within {timeout_s:.0f} s")

    def _fail(self, msg: str) -> None:
        self.close()
        raise RankFailed(msg)

    def generate(self, requests: list[tuple[int, list[int], SamplingParams]]) -> dict[int, dict]:
        """Queue (uid, token ids, SamplingParams) on every rank and wait for rank 0's tokens. Returns
        {uid: {"token_ids", "finish_reason", "clamped"}}; a refused request aborts the others and
        raises its ValueError, as `Scheduler.add_request` does for tp=1."""
        self.publish(BatchBackendMsg([UserMsg(uid, torch.tensor(ids, dtype=torch.int32), sp)
                                      for uid, ids, sp in requests]))
        out = {uid: {"token_ids": [], "finish_reason": None, "clamped": False} for uid, _, _ in requests}
        left, errors = set(out), []
        while left:
            for m in self.next_replies():
                if not isinstance(m, DetokenizeMsg) or m.uid not in left:
                    continue
                o = out[m.uid]
                o["token_ids"] += [m.next_token] if m.next_token >= 0 else []
                o["clamped"] |= m.clamped
                if m.error is not None and not errors:  # all or none: abort what was queued
                    errors.append(m.error)
                    self.publish(BatchBackendMsg([AbortMsg(uid) for uid in left if uid != m.uid]))
                if m.finished:
                    o["finish_reason"] = m.finish_reason
                    left.discard(m.uid)
        if errors:
            raise ValueError(errors[0])
        return out

    def record(self, logits: bool = False, live: bool = False, stop: bool = False) -> None:
        """Make every rank record each step it runs from now on (see `RecordMsg`)."""
        self.publish(RecordMsg(logits, live, stop))

    def reports(self) -> list[RankReport]:
        """Every rank's shard shapes and the steps it ran since the last report."""
        self.publish(ReportMsg())
        got: dict[int, RankReport] = {}
        while len(got) < self.size:
            got.update((m.rank, m) for m in self.next_replies() if isinstance(m, RankReport))
        return [got[r] for r in sorted(got)]

    def close(self) -> None:
        self._finalizer()


class LLM:
    """`LLM(model=None, **kw)`: every keyword is a field of `config.SchedulerConfig` (device, dtype,
    page_size, max_prefill_tokens, cache, dummy_weights, tp, overlap, attention, fused_kernels, trace, ...)."""

    def __init__(self, model: str | None = None, **kw):
        if kw.get("tp", 1) > 1:
            refuse_unguarded_main()  # first: a child importing an unguarded script leaves before any work
        self.cfg = cfg = SchedulerConfig(model_path=resolve_model(model), **kw)
        self.model_path, self.tp = cfg.model_path, cfg.tp
        self.ranks, self.engine, self.scheduler, self.tracer = None, None, None, None
        self._uids = itertools.count()
        self.tokenizer = load_tokenizer(self.model_path)
        if cfg.tp > 1:  # chapter 8: every rank is a child process running this same engine + scheduler
            check_tp(load_config(self.model_path), cfg.tp)  # a bad split is refused before any process starts
            self.ranks = RankGroup(cfg)
        else:
            self.scheduler = build_scheduler(cfg)
            self.engine, self.tracer = self.scheduler.engine, self.scheduler.tracer

    def close(self) -> None:
        """Stop the rank processes (tp > 1) and write the step trace, if any."""
        if self.tracer is not None:
            self.tracer.save()
        if self.ranks is not None:
            self.ranks.close()

    def encode(self, prompt: str | list[int], chat: bool) -> list[int]:
        if isinstance(prompt, (list, tuple)):
            return [int(t) for t in prompt]
        if not isinstance(prompt, str):
            raise ValueError(f"a prompt is a string or a list of token ids, got {type(prompt).__name__}")
        if self.tokenizer is None:
            raise ValueError("this model folder has no tokenizer: pass token ids")
        if chat and self.tokenizer.chat_template:
            ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return self.tokenizer.encode(prompt)

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 chat: bool = False, use_tqdm: bool = True) -> list[dict]:
        """Generate for every prompt together; return [{"text", "token_ids", "finish_reason", "prompt_tokens"}] in order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        params = sampling_params or SamplingParams()
        params = params if isinstance(params, list) else [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        reqs = [(next(self._uids), self.encode(p, chat), sp) for p, sp in zip(prompts, params)]
        if self.ranks is None:
            outs = self._run(reqs, use_tqdm)
        else:  # rank 0's tokens; every rank computed the same ones
            outs = self.ranks.generate(reqs)
            if any(o["clamped"] for o in outs.values()):
                warnings.warn("max_tokens cut to fit the context")
        return [{"text": self.decode(outs[uid]["token_ids"]), "token_ids": outs[uid]["token_ids"],
                 "finish_reason": outs[uid]["finish_reason"], "prompt_tokens": len(ids)} for uid, ids, _ in reqs]

    def _run(self, reqs: list[tuple[int, list[int], SamplingParams]], use_tqdm: bool) -> dict[int, dict]:
        """tp=1: queue every request (all or none: a bad one aborts the others), step until all finish."""
        sched, added = self.scheduler, []
        try:
            for uid, ids, sp in reqs:
                added.append(sched.add_request(uid, ids, sp))
        except Exception:
            for r in added:
                sched.abort(r.uid)
            raise
        for r in added:
            if r.clamped:
                warnings.warn(f"max_tokens cut to {r.max_device_len - r.prompt_len} to fit the context")
        from tqdm.auto import tqdm
        bar = tqdm(total=sum(r.max_device_len - r.prompt_len for r in added), desc="generate", unit="tok",
                   disable=not use_tqdm)
        done = 0
        while done < len(added):
            outs = sched.step()
            bar.update(len(outs))
            done += sum(o.finished for o in outs)
        bar.close()
        if sched.idle:
            sched.check_integrity()
        if self.tracer is not None:
            self.tracer.save()  # every step so far: a later generate() rewrites it with more
        return {r.uid: {"token_ids": r.output_ids, "finish_reason": r.finish_reason} for r in added}

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer else ""
