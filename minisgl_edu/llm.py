"""The offline API: the scheduler in this process, no ZMQ.

    from minisgl_edu import LLM, SamplingParams
    llm = LLM()                                   # the default model, device picked automatically
    out = llm.generate(["The capital of France is"], SamplingParams(max_tokens=16))
    out[0]["text"], out[0]["token_ids"]           # the generated part only

String prompts are used as they are (raw text) unless `chat=True`, which wraps each in the model's
chat template as one user message.

`LLM(trace="steps.json")` writes a Chrome/Perfetto step trace (chapter 6) each time `generate`
returns; open it in https://ui.perfetto.dev.
"""
from __future__ import annotations

import itertools
import logging
import os
import warnings

import torch

from .default_model import default_model_path
from .engine import EngineConfig
from .model import check_tp, load_config
from .req import SamplingParams
from .scheduler import build_scheduler
from .tp import RankGroup

log = logging.getLogger("minisgl_edu")


def resolve_model(model: str | None) -> str:
    if model is None:
        return default_model_path()
    if os.path.isdir(model):
        return model
    from huggingface_hub import snapshot_download  # only what is already in the local hub cache
    try:
        return snapshot_download(model, local_files_only=True)
    except Exception as e:
        raise ValueError(f"model {model!r} is neither a folder nor in the local Hugging Face cache") from e


def load_tokenizer(path: str, warn: bool = True):
    """The folder's tokenizer, or None: a config-only folder (dummy weights) may have none, and ids still work."""
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:
        if warn:
            log.warning("no tokenizer in %s (%s): pass token ids", path, e)
        return None


def eos_ids(path: str, tokenizer) -> tuple[int, ...]:
    ids = set()
    try:
        from transformers import GenerationConfig
        e = GenerationConfig.from_pretrained(path).eos_token_id
        ids.update(e if isinstance(e, list) else [e] if e is not None else [])
    except OSError:
        pass
    if not ids and tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return tuple(ids)


class LLM:
    def __init__(self, model: str | None = None, device: str | None = None, dtype: torch.dtype | None = None,
                 page_size: int = 1, max_prefill_tokens: int = 8192, cache: str = "radix",
                 dummy_weights: bool = False, tp: int = 1, overlap: bool | None = None,
                 cuda_graph_max_bs: int = 256, max_running_reqs: int = 256, max_total_tokens: int | None = None,
                 max_seq_len: int | None = None, attention: str | None = None, seed: int = 0,
                 trace: str | None = None):
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        if trace is not None and tp > 1:
            raise ValueError("trace= is for tp=1 here; `serve --tp N --trace PATH` traces rank 0")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model_path = resolve_model(model)
        engine_cfg = EngineConfig(self.model_path, device, dtype, page_size, max_running_reqs, max_seq_len,
                                  max_total_tokens, dummy_weights=dummy_weights, attention=attention,
                                  cuda_graph_max_bs=cuda_graph_max_bs, seed=seed)
        self.tp, self.ranks, self.engine, self.scheduler, self.tracer = tp, None, None, None, None
        self._uids = itertools.count()
        if tp > 1:
            check_tp(load_config(self.model_path), tp)  # refuse a bad split here, before any process starts
        self.tokenizer = load_tokenizer(self.model_path)
        sched_kw = dict(max_prefill_tokens=max_prefill_tokens, cache=cache, overlap=overlap,
                        eos_token_ids=eos_ids(self.model_path, self.tokenizer))
        if tp > 1:  # chapter 8: every rank is a child process running this same engine + scheduler
            self.ranks = RankGroup(tp, engine_cfg, sched_kw)
        else:
            self.scheduler = build_scheduler(engine_cfg, trace=trace, **sched_kw)
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
        """Generate for every prompt together; return [{"text", "token_ids", "finish_reason"}] in order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        params = sampling_params or SamplingParams()
        params = params if isinstance(params, list) else [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        if self.ranks is not None:  # rank 0's tokens; every rank computed the same ones
            reqs = [(next(self._uids), self.encode(p, chat), sp) for p, sp in zip(prompts, params)]
            outs = self.ranks.generate(reqs)
            if any(outs[uid]["clamped"] for uid, _, _ in reqs):
                warnings.warn("max_tokens cut to fit the context")
            return [{"text": self.decode(outs[uid]["token_ids"]), "token_ids": outs[uid]["token_ids"],
                     "finish_reason": outs[uid]["finish_reason"], "prompt_tokens": len(ids)} for uid, ids, _ in reqs]
        sched = self.scheduler
        uids, reqs = [], []
        try:  # validate everything first: a bad prompt queues nothing
            for prompt, sp in zip(prompts, params):
                uid = next(self._uids)
                reqs.append(sched.add_request(uid, self.encode(prompt, chat), sp))
                uids.append(uid)
        except Exception:
            for uid in uids:
                sched.abort(uid)
            raise
        for r in reqs:
            if r.clamped:
                warnings.warn(f"max_tokens cut to {r.max_device_len - r.prompt_len} to fit the context")
        from tqdm.auto import tqdm
        bar = tqdm(total=sum(r.max_device_len - r.prompt_len for r in reqs), desc="generate", unit="tok",
                   disable=not use_tqdm)
        done = 0
        while done < len(reqs):
            outs = sched.step()
            bar.update(len(outs))
            done += sum(o.finished for o in outs)
        bar.close()
        if sched.idle:
            sched.check_integrity()
        if self.tracer is not None:
            self.tracer.save()  # every step so far: a later generate() rewrites it with more
        return [{"text": self.decode(r.output_ids), "token_ids": r.output_ids, "finish_reason": r.finish_reason,
                 "prompt_tokens": r.prompt_len} for r in reqs]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer else ""
