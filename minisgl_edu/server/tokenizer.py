"""Chapters 1 and 9 — one worker function, two jobs: text -> token ids, and token ids -> text.

`tokenize_worker(tokenizer_id, ...)` is the detokenizer when `tokenizer_id == num_tokenizers`, else a
tokenizer. Why the detokenizer holds back a half character is chapter 1's; `detokenize_batch` (one
Rust `decode_batch` per step), `detokenize_columns` (a step's TokenColumns to its ReplyColumns, no
object per token) and their per-token twin `detokenize_next` (`--naive-stream`) chapter 9's.
With `--skip-tokenizer-init` the detokenizer forwards the ids themselves (`UserReply.output_ids`).
"""
from __future__ import annotations

import logging
import os
import time
import weakref
from dataclasses import dataclass, field

from ..messages import (BatchBackendMsg, BatchFrontendMsg, DetokenizeMsg, ExitMsg, ReplyColumns, SchedulerStats,
                        StatsReply, TokenColumns, TokenizeMsg, UserMsg, UserReply, decode, reply_columns, unbatch,
                        unbatch_rows)
from .common import (STALL_LOG_MS, RateLimited, ServerConfig, exit_child, freeze_startup_objects, send_ack,
                     setup_child, trace)
from .queues import Addresses, Queue, pull, push

log = logging.getLogger("minisgl_edu")


def worker_name(tokenizer_id: int, num_tokenizers: int) -> str:
    return "detokenizer" if tokenizer_id == num_tokenizers else f"tokenizer-{tokenizer_id}"


def tokenize_worker(tokenizer_id: int, cfg: ServerConfig, addrs: Addresses, parent_pid: int) -> None:
    name = worker_name(tokenizer_id, addrs.num_tokenizers)
    setup_child(name, parent_pid)
    try:
        import torch
        torch.set_num_threads(1)  # the engine needs the cores; tokenizing is light
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # a step's decode_batch is ~0.5 ms: no rayon pool per call
        tok = None
        if not cfg.skip_tokenizer_init:
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(cfg.model_path)
        to_frontend = push(addrs.frontend)
        if tokenizer_id == addrs.num_tokenizers:
            inbox = pull(addrs.detokenizer)
        else:
            inbox, to_scheduler = pull(addrs.tokenizer(tokenizer_id)), push(addrs.scheduler)
    except BaseException as e:
        send_ack(addrs.ack, name, e)
        raise SystemExit(1)
    freeze_startup_objects(name, cfg.gc_threshold)  # the tokenizer's Python objects stay for good
    send_ack(addrs.ack, name)
    if tokenizer_id == addrs.num_tokenizers:
        detokenize_loop(tok, inbox, to_frontend, cfg)
    else:
        tokenize_loop(tok, inbox, to_scheduler, to_frontend, cfg, name)
    exit_child(0)


def receive_all(inbox: Queue, rows: bool = True) -> list:
    """Wait for one message, then take whatever else is already waiting (one batch per wake-up); `rows=False`
    leaves each TokenColumns whole (the detokenizer reads them as columns)."""
    split = unbatch_rows if rows else unbatch
    return [m for raw in [inbox.get_raw()] + inbox.drain_raw() for m in split(decode(raw))]


# ---- text -> token ids ---------------------------------------------------------------------------
def prompt_ids(tok, msg: TokenizeMsg) -> list[int]:
    """A TokenizeMsg's prompt as token ids: token ids as given, chat messages through the chat template."""
    if msg.input_ids is not None:
        return list(msg.input_ids)
    if tok is None:
        raise ValueError("the server runs with --skip-tokenizer-init: send token ids")
    if msg.messages is not None:
        if not tok.chat_template:
            raise ValueError("this model has no chat template: use /v1/completions")
        ids = tok.apply_chat_template(msg.messages, add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return tok.encode(msg.text)


def tokenize_loop(tok, inbox: Queue, to_scheduler: Queue, to_frontend: Queue, cfg: ServerConfig, name: str) -> None:
    import torch
    while True:
        out, errors = [], []
        msgs = receive_all(inbox)
        trace(cfg, name, "recv TokenizeMsg", [m.uid for m in msgs if isinstance(m, TokenizeMsg)])
        for msg in msgs:
            if isinstance(msg, TokenizeMsg):
                try:
                    ids = torch.tensor(prompt_ids(tok, msg), dtype=torch.int32)
                except Exception as e:  # a chat template that rejects the roles, an id beyond int32: tell the client
                    errors.append(UserReply(msg.uid, "", True, "error", error=f"cannot tokenize: {e}", status=400))
                    continue
                out.append(UserMsg(msg.uid, ids, msg.sampling_params))
            else:
                out.append(msg)  # AbortMsg, StatsMsg, ExitMsg go on unchanged, in order
        if out:
            trace(cfg, name, "send UserMsg", [m.uid for m in out if isinstance(m, UserMsg)])
            to_scheduler.put(out[0] if len(out) == 1 else BatchBackendMsg(out))
        if errors:
            to_frontend.put(BatchFrontendMsg(errors))
        if any(isinstance(m, ExitMsg) for m in msgs):
            return


# ---- token ids -> text ---------------------------------------------------------------------------
@dataclass
class DecodeState:
    """One request's incremental detokenization."""
    ids: list[int] = field(default_factory=list)  # the tokens that make text (a skipped special one never joins)
    prefix_offset: int = 0  # the decode window starts here (context for tokenizers that merge spaces)
    read_offset: int = 0  # text up to here has been sent
    count: int = 0  # every token the request has produced, skipped ones too: its completion tokens


_SKIPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def skipped_ids(tok) -> frozenset[int]:
    """The ids a decode with skip_special_tokens drops before it decodes (special added tokens: SmolLM2's 17).
    They never make text, so the windows leave them out and a run of them costs no decode: a model with dummy
    weights repeated one for 812 tokens of one stream, and each token made the windows, and the let_go cuts, longer."""
    if tok not in _SKIPPED:
        ids = set(getattr(tok, "all_special_ids", [])) | {i for i, t in getattr(tok, "added_tokens_decoder", {}).items()
                                                          if getattr(t, "special", False)}
        _SKIPPED[tok] = frozenset(i for i in ids if tok.decode([i], skip_special_tokens=True) == "")
    return _SKIPPED[tok]


SKIP_SPECIAL = True  # False: the twin whose windows keep the special tokens (the tests keep it)


def text_tokens(tok, states: list[DecodeState], tokens: list[int]) -> list[int]:
    """Count each token into its state; the ones the decode skips become -1 (nothing new to decode)."""
    skipped = skipped_ids(tok) if SKIP_SPECIAL else ()
    out = []
    for s, t in zip(states, tokens):
        if t >= 0:
            s.count += 1
        out.append(-1 if t in skipped else t)
    return out


# A UTF-8 character is at most 4 bytes and a token at least one, so valid text is held back for at most 3 tokens
# (a character's first byte, then up to 2 more tokens before its last byte completes it). A longer hold means
# bytes that no later byte can complete: a model can emit them for hundreds of tokens (an H200 run with dummy
# weights held two streams' first text for 420 ms), so the text before the last 3 tokens goes out, U+FFFD and all.
HOLD_LIMIT = 4
BOUNDED_HOLD = True  # False: the twin that holds such bytes until the request ends (the tests keep it)


def emit(state: DecodeState, sent: str, window: str, final: bool, decode=None) -> str:
    """Given the sent text and the window decoded again: the new text, once it is complete. `decode` (ids ->
    text) lets a hold of HOLD_LIMIT tokens or more let go of the bytes no later token can complete."""
    if len(window) > len(sent) and (final or not window.endswith("\ufffd")):  # hold back a half character
        state.prefix_offset, state.read_offset = state.read_offset, len(state.ids)
        return window[len(sent):]
    if decode is not None and len(state.ids) - state.read_offset >= HOLD_LIMIT:
        return let_go(state, sent, window, decode)
    return ""


def let_go(state: DecodeState, sent: str, window: str, decode) -> str:
    """The text of all but the last 3 held tokens, which may still begin a character, where it is final: a prefix
    of the whole window (a character completed across the cut would decode otherwise), cut a little earlier if not.
    A character spans at most 4 tokens, so 4 cuts find one; when none has text (a run of special tokens, which the
    decode skips), the hold goes on: a few decodes a token, not one per token held."""
    last = len(state.ids) - (HOLD_LIMIT - 1)
    for cut in range(last, max(state.read_offset, last - HOLD_LIMIT), -1):  # a few cuts: each one is a decode
        head = decode(state.ids[state.prefix_offset:cut])
        if len(head) > len(sent) and window.startswith(head):
            state.prefix_offset, state.read_offset = state.read_offset, cut
            return head[len(sent):]
    return ""


def detokenize_next(tok, state: DecodeState, token: int, final: bool = False) -> str:
    """Add `token` (-1 = none) and return the text that is now complete (at the end: everything left)."""
    if token >= 0:
        state.ids.append(token)
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    sent, window = decode(state.ids[state.prefix_offset:state.read_offset]), decode(state.ids[state.prefix_offset:])
    return emit(state, sent, window, final, decode if BOUNDED_HOLD else None)


def token_entry(tok, token: int, logprob: float) -> dict:
    text = tok.decode([token])
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8", "replace"))}


def logprob_entries(tok, msg: DetokenizeMsg) -> list[dict]:
    """The token's logprob entry in OpenAI's chat shape, its alternatives as text (chapter 9)."""
    chosen, top_ids, top_values = msg.logprobs
    tops = [token_entry(tok, t, v) for t, v in zip(top_ids, top_values)]
    return [{**token_entry(tok, msg.next_token, chosen), "top_logprobs": tops}]


def batch_decoder(tok):
    """The Rust tokenizer's decode_batch when it decodes exactly as `tok.decode` does; else None."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or getattr(tok, "clean_up_tokenization_spaces", False):
        return None
    return lambda seqs: backend.decode_batch(seqs, skip_special_tokens=True)


def detokenize_batch(tok, states: list[DecodeState], tokens: list[int], finals: list[bool], decoder=None) -> list[str]:
    """detokenize_next for many requests (each state at most once): all 2n windows in one decode_batch call."""
    decoder = decoder or batch_decoder(tok)
    if decoder is None:  # a slow tokenizer, or one that cleans up spaces: the per-request twin
        return [detokenize_next(tok, s, t, f) for s, t, f in zip(states, tokens, finals)]
    for s, t in zip(states, tokens):
        if t >= 0:
            s.ids.append(t)
    texts = decoder([s.ids[s.prefix_offset:s.read_offset] for s in states] + [s.ids[s.prefix_offset:] for s in states])
    n = len(states)
    one = (lambda ids: decoder([ids])[0]) if BOUNDED_HOLD else None  # a long hold's let_go: rare
    return [emit(s, sent, window, f, one) for s, sent, window, f in zip(states, texts[:n], texts[n:], finals)]


CLAMPED_WARNING = "max_tokens was reduced to what the model's context leaves after this prompt"


def rounds(msgs: list[DetokenizeMsg]) -> list[list[DetokenizeMsg]]:
    """Split into consecutive groups in which each uid appears once (a batch decode reads each state once)."""
    out, seen = [[]], set()
    for m in msgs:
        if m.uid in seen:
            out.append([])
            seen.clear()
        out[-1].append(m)
        seen.add(m.uid)
    return [g for g in out if g]


def detokenize_step(tok, states: dict[int, DecodeState], msgs: list[DetokenizeMsg], naive: bool) -> list[UserReply]:
    """UserReplies for one batch of DetokenizeMsgs (in order; a uid may come twice: two steps); errors pass through."""
    todo = [m for m in msgs if m.error is None]
    done: dict[int, tuple[str, int]] = {}  # id(msg) -> (its text, the request's token count after it)
    if tok is None:  # --skip-tokenizer-init: the ids are the output, the text stays empty
        for m in todo:
            st = states.setdefault(m.uid, DecodeState())
            if m.next_token >= 0:
                st.count += 1
            done[id(m)] = ("", st.count)
    elif naive:
        for m in todo:
            st = states.setdefault(m.uid, DecodeState())
            token, = text_tokens(tok, [st], [m.next_token])
            done[id(m)] = (detokenize_next(tok, st, token, m.finished), st.count)
    else:
        decoder = batch_decoder(tok)
        for group in rounds(todo):
            sts = [states.setdefault(m.uid, DecodeState()) for m in group]
            tokens = text_tokens(tok, sts, [m.next_token for m in group])
            outs = detokenize_batch(tok, sts, tokens, [m.finished for m in group], decoder)
            done.update((id(m), (t, st.count)) for m, t, st in zip(group, outs, sts))
    replies = []
    for m in msgs:
        if m.error is not None:
            replies.append(UserReply(m.uid, "", True, "error", error=m.error, status=m.status))
            continue
        text, n = done[id(m)]
        ids = ([m.next_token] if m.next_token >= 0 else []) if tok is None else None
        lp = logprob_entries(tok, m) if m.logprobs is not None and tok is not None else None
        replies.append(UserReply(m.uid, text, m.finished, m.finish_reason, m.prompt_tokens, n,
                                 CLAMPED_WARNING if m.clamped else None, logprobs=lp, output_ids=ids))
        if m.finished:
            states.pop(m.uid, None)
    return replies


def detokenize_columns(tok, states: dict[int, DecodeState], cols: TokenColumns, decoder=None) -> ReplyColumns:
    """A step's plain tokens as its plain replies, column in and column out: no message object per token.
    Equal to detokenize_step over `cols.rows()` (a step's uids are distinct: one batch decode reads each state once)."""
    sts = [states.get(u) or states.setdefault(u, DecodeState()) for u in cols.uids]  # no DecodeState built per lookup
    if tok is None:  # --skip-tokenizer-init: the ids are the output, the text stays empty
        for s, t in zip(sts, cols.next_tokens):
            if t >= 0:
                s.count += 1
        return ReplyColumns(cols.uids, [""] * len(sts), [s.count for s in sts],
                            [[t] if t >= 0 else [] for t in cols.next_tokens], sent=cols.sent)
    texts = detokenize_batch(tok, sts, text_tokens(tok, sts, cols.next_tokens), [False] * len(sts), decoder)
    return ReplyColumns(cols.uids, texts, [s.count for s in sts], sent=cols.sent)


def detokenize_wake(tok, states: dict[int, DecodeState], msgs: list, naive: bool) -> list:
    """What one wake-up's messages send to the API, in their order (a uid may come in two steps): the stats first,
    each TokenColumns as one ReplyColumns, each run of DetokenizeMsgs (finishing tokens, logprobs, warnings,
    errors) through detokenize_step. `naive` (--naive-stream): one UserReply per token, columns expanded."""
    out = [m for m in msgs if isinstance(m, (StatsReply, SchedulerStats))]
    decoder = batch_decoder(tok) if tok is not None else None
    run: list[DetokenizeMsg] = []
    for m in msgs + [None]:  # None: the end, where the last run is flushed
        if isinstance(m, DetokenizeMsg):
            run.append(m)
            continue
        if run:
            replies = detokenize_step(tok, states, run, naive)
            out += replies if naive else reply_columns(replies)
            run = []
        if isinstance(m, TokenColumns) and naive:
            out += detokenize_step(tok, states, m.rows(), True)
        elif isinstance(m, TokenColumns):
            out.append(detokenize_columns(tok, states, m, decoder))
    return out


def reply_uids(items: list, cls: type, cols: type) -> list[int]:
    """The hop log's uids of `cls` messages, a columns message (`cols`) counting each of its uids."""
    return [u for m in items for u in (m.uids if isinstance(m, cols) else [m.uid] if isinstance(m, cls) else [])]


def slow_wake(states: dict[int, DecodeState], msgs: list, seconds: float) -> str:
    """What a slow wake of the detokenizer had in hand: its messages, the requests alive, the longest hold (tokens
    not yet sent as text) and the longest window (the tokens each of its decodes covers)."""
    hold = max(states.items(), key=lambda kv: len(kv[1].ids) - kv[1].read_offset, default=None)
    window = max((len(s.ids) - s.prefix_offset for s in states.values()), default=0)
    return (f"detokenizer: one wake took {seconds * 1e3:.1f} ms ({len(msgs)} messages, {len(states)} requests alive; "
            f"the longest hold {len(hold[1].ids) - hold[1].read_offset if hold else 0} tokens"
            f"{f' (uid {hold[0]})' if hold else ''}, the longest window {window} tokens)")


def detokenize_loop(tok, inbox: Queue, to_frontend: Queue, cfg: ServerConfig) -> None:
    states: dict[int, DecodeState] = {}
    stall_logged = RateLimited()
    while True:
        msgs = receive_all(inbox, rows=False)  # a TokenColumns stays one message, through to its ReplyColumns
        received = time.perf_counter()
        if cfg.hop_log:
            trace(cfg, "detokenizer", "recv DetokenizeMsg", reply_uids(msgs, DetokenizeMsg, TokenColumns))
        replies = detokenize_wake(tok, states, msgs, cfg.naive_stream)
        if replies:
            if cfg.hop_log:
                trace(cfg, "detokenizer", "send UserReply", reply_uids(replies, UserReply, ReplyColumns))
            now = time.perf_counter()
            for r in replies:
                if type(r) is ReplyColumns:  # the step's way so far, for /metrics' reply hops
                    r.detok_in, r.detok_out = received, now
            to_frontend.put(BatchFrontendMsg(replies))
            if STALL_LOG_MS > 0 and (now - received) * 1e3 > STALL_LOG_MS and stall_logged(now):
                log.warning(slow_wake(states, msgs, now - received))
        if any(isinstance(m, ExitMsg) for m in msgs):
            return
