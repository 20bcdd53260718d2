"""Chapters 1 and 9: the real server — real processes, ZMQ on ipc://, HTTP on 127.0.0.1 only.

One server on the default model for most tests (module-scoped), and one with `--tp 3 --api-key`
that ends by being killed (the watchdog test). Expected texts come from the offline `LLM` on the
same weights, so nothing here is hard-coded.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl_edu import LLM, SamplingParams
from minisgl_edu.bench_serve import free_port, wait_healthy
from minisgl_edu.server import tokenizer as detok
from minisgl_edu.server.tokenizer import HOLD_LIMIT, DecodeState, detokenize_batch, detokenize_next

QUESTION = "What is the capital of France?"
N = 24


class Server:
    def __init__(self, *args: str, timeout: float = 300.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.devnull, "w") if os.environ.get("MINISGL_TEST_QUIET") else None
        self.proc = subprocess.Popen([sys.executable, "-m", "minisgl_edu.serve", "--port", str(self.port), *args],
                                     stdout=self.log, stderr=self.log)
        try:
            wait_healthy(self.url, self.proc, timeout)
        except RuntimeError:
            self.stop()
            raise
        self.children = psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for c in getattr(self, "children", []):  # a test failure must never leave workers behind
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass


def no_survivors(children: list[psutil.Process]) -> bool:
    """True once every former child has exited (the resource tracker needs a moment after its parent)."""
    _, alive = psutil.wait_procs(children, timeout=5)
    return not [c for c in alive if c.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def server(default_server):  # the session's one default-model server (tests/conftest.py checks its clean stop)
    return default_server


@pytest.fixture(scope="module")
def llm(model_path):
    return LLM(model_path, device="cpu")


def chat_body(content: str, **kw) -> dict:
    return {"messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": N, **kw}


def stream_text(url: str, body: dict, headers: dict | None = None) -> tuple[str, list[dict]]:
    """POST with stream=true; return the concatenated text and every chunk."""
    chunks, text = [], []
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=headers, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            chunks.append(c)
            for ch in c.get("choices", []):
                text.append(ch.get("delta", {}).get("content") or ch.get("text") or "")
    return "".join(text), chunks


# ---- detokenization (no processes) ---------------------------------------------------------------
def test_incremental_detokenization_never_splits_a_character(tokenizer):
    text = "Tokyo is 東京 (日本語) 🙂 — déjà vu, naïve café."
    ids = tokenizer.encode(text)
    assert len(ids) > len(tokenizer.decode(ids).split()), "some characters should span several tokens"
    st, pieces = DecodeState(), []
    for i, t in enumerate(ids):
        pieces.append(detokenize_next(tokenizer, st, t, final=i == len(ids) - 1))
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True) == text
    assert sum(p == "" for p in pieces) >= 2  # some tokens were held back: half a character



def byte_token(tok, b: int) -> int:
    """The id of byte b's own token in a byte-level BPE vocabulary (GPT-2's printable stand-ins for bytes)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), ord("\xff") + 1)]
    ch = chr(b) if b in keep else chr(256 + sorted(set(range(256)) - set(keep)).index(b))
    t = tok.convert_tokens_to_ids(ch)
    assert tok.convert_ids_to_tokens(t) == ch, hex(b)
    return t


def stream_pieces(tok, ids: list[int], batched: bool = False) -> list[str]:
    st = DecodeState()
    if batched:
        return [detokenize_batch(tok, [st], [t], [i == len(ids) - 1])[0] for i, t in enumerate(ids)]
    return [detokenize_next(tok, st, t, final=i == len(ids) - 1) for i, t in enumerate(ids)]


def let_go_everything(state, sent, window, decode):
    """A wrong let_go the test below catches: the whole window on a long hold, its last 3 tokens too."""
    state.prefix_offset, state.read_offset = state.read_offset, len(state.ids)
    return window[len(sent):]


def test_detokenizer_lets_go_of_bytes_no_token_can_complete(tokenizer, monkeypatch):
    """A run of bytes that never form UTF-8 (here 40 first bytes of a 4-byte character in a row, as a model with
    dummy weights emitted on the H200) goes out as U+FFFD once HOLD_LIMIT tokens are held, not at the request's
    end; a character that can still complete stays whole, after garbage too: the pieces are the whole decode."""
    b = {x: byte_token(tokenizer, x) for x in (0x80, 0xF0, 0x9F, 0x99, 0x82, 0xE2, 0xAC, 0x41)}
    run = [b[0xF0]] * 40
    for batched in (False, True):
        pieces = stream_pieces(tokenizer, run, batched)
        assert pieces[:HOLD_LIMIT - 1] == [""] * 3 and pieces[-1] == "\ufffd" * HOLD_LIMIT  # the end: all 4 held
        assert all(p == "\ufffd" for p in pieces[HOLD_LIMIT - 1:-1])  # from the 4th held token on: one a token
    monkeypatch.setattr(detok, "BOUNDED_HOLD", False)  # the unbounded twin: nothing until the end
    for batched in (False, True):
        held = stream_pieces(tokenizer, run, batched)
        assert held[:-1] == [""] * 39 and held[-1] == "\ufffd" * 40
    monkeypatch.setattr(detok, "BOUNDED_HOLD", True)
    smile = [b[0x80]] * 3 + [b[0xF0], b[0x9F], b[0x99], b[0x82], b[0x41]]  # garbage, then 🙂 one byte a token
    euro = [b[0x80]] * 3 + [b[0xE2], b[0x82], b[0xAC], b[0xF0]] + [b[0x80]] * 3  # €, then a first byte that fails
    for ids, whole in ((smile, "\ufffd" * 3 + "\U0001F642A"), (euro, "\ufffd" * 3 + "\u20ac" + "\ufffd" * 4)):
        assert tokenizer.decode(ids) == whole
        for batched in (False, True):
            pieces = stream_pieces(tokenizer, ids, batched)
            assert "".join(pieces) == whole and all(p == "" for p in pieces[:HOLD_LIMIT - 1])
            assert any(p.startswith("\ufffd") for p in pieces[:-1])  # the garbage went out before the end
    monkeypatch.setattr(detok, "let_go", let_go_everything)
    assert "".join(stream_pieces(tokenizer, smile)) != "\ufffd" * 3 + "\U0001F642A"  # 🙂 cut: caught


def let_go_scanning(state, sent, window, decode):
    """Session 25's let_go, kept as the wrong one: it tries every cut back to the last text sent, so a run of held
    tokens that make no text (special tokens) is decoded again, cut by cut, at every token."""
    for cut in range(len(state.ids) - (HOLD_LIMIT - 1), state.read_offset, -1):
        head = decode(state.ids[state.prefix_offset:cut])
        if len(head) > len(sent) and window.startswith(head):
            state.prefix_offset, state.read_offset = state.read_offset, cut
            return head[len(sent):]
    return ""


def test_detokenizer_holds_no_text_at_a_few_decodes_a_token(tokenizer, monkeypatch):
    """A stream of special tokens (decode skips them: no text ever) followed by text: the pieces are the whole
    decode, and each token costs a few decodes however long the hold. A model with dummy weights on the H200 emitted such
    streams; with session 25's let_go every token decoded every held prefix again (400 tokens here: ~80,000
    decodes, 0.8 s of a detokenizer that serves every stream; served, 50-85 ms stalls of all of them)."""
    special = tokenizer.all_special_ids[0]
    ids = [special] * 400 + tokenizer.encode(" and then some text, déjà vu 🙂")
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    calls = [0]
    real = tokenizer.decode

    def counted(*a, **kw):
        calls[0] += 1
        return real(*a, **kw)
    monkeypatch.setattr(tokenizer, "decode", counted)
    assert "".join(stream_pieces(tokenizer, ids)) == whole
    assert calls[0] <= (2 + HOLD_LIMIT) * len(ids), calls[0]  # the two windows, and at most 4 cuts, a token
    monkeypatch.setattr(detok, "let_go", let_go_scanning)
    calls[0] = 0
    assert "".join(stream_pieces(tokenizer, ids)) == whole  # right text, ...
    assert calls[0] > 50 * len(ids)  # ... at a decode per held token per token: caught


def served_pieces(tok, ids: list[int], uid: int = 7) -> tuple[list[str], list[int], int]:
    """One stream through the detokenizer's own wake function, as its loop gets it (each token a step's
    TokenColumns, the last a finishing DetokenizeMsg): (text pieces, completion-token counts, ids decoded in all)."""
    from minisgl_edu.messages import DetokenizeMsg, ReplyColumns, TokenColumns
    decoded, real = [0], detok.batch_decoder(tok)

    def counting(seqs):
        decoded[0] += sum(map(len, seqs))
        return real(seqs)
    states, texts, counts, orig = {}, [], [], detok.batch_decoder
    detok.batch_decoder = lambda _tok: counting
    try:
        for i, t in enumerate(ids):
            msg = DetokenizeMsg(uid, t, True, "length") if i == len(ids) - 1 else TokenColumns([uid], [t])
            out, = detok.detokenize_wake(tok, states, [msg], False)
            r, = out.rows() if isinstance(out, ReplyColumns) else [out]  # a finished one stays a UserReply
            texts.append(r.incremental_output)
            counts.append(r.completion_tokens)
    finally:
        detok.batch_decoder = orig
    return texts, counts, decoded[0]


def windows_end_at_special_tokens(tok, states, tokens):
    """A wrong text_tokens the test below catches: it leaves the skipped tokens out and also starts the next window
    after them, as if a special token ended the text before it; a SentencePiece decode then drops the next word's
    leading space (the window's first token loses it)."""
    out = []
    for s, t in zip(states, tokens):
        s.count += t >= 0
        if t in detok.skipped_ids(tok):
            if s.read_offset == len(s.ids):  # nothing held: the window restarts here
                s.prefix_offset = s.read_offset
            t = -1
        out.append(t)
    return out


def metaspace_tokenizer():
    """A tiny SentencePiece-style tokenizer (words with a leading U+2581, a decoder that drops the first token's
    leading space) with a special token <x>: the kind of tokenizer whose windows need a token of context."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0} | {f"\u2581{w}": i + 1 for i, w in enumerate(["hello", "world", "the", "a", "b"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")
    tok.add_special_tokens({"additional_special_tokens": ["<x>"]})
    return tok


def test_special_tokens_never_join_a_window(tokenizer, monkeypatch):
    """Tokens the decode skips (SmolLM2's 17 special tokens) cost the detokenizer nothing: its windows leave them out,
    so the ids it decodes stay those of the text however long a run of them, while every token still counts. With
    dummy weights, request 28 of `bench compare`'s first rate run repeats special token 10 for 812 tokens; every
    session-26 H200 run stalled there (benchmarks/issue18/cpu-s27/). The twin that keeps them in the windows
    (SKIP_SPECIAL False) decodes the whole run again at every token: caught. A window that restarts after them
    drops a SentencePiece word's space: caught."""
    assert 10 in detok.skipped_ids(tokenizer) and len(detok.skipped_ids(tokenizer)) == 17
    assert not detok.skipped_ids(tokenizer) & set(tokenizer.encode("déjà 🙂 and then text"))
    text = tokenizer.encode("déjà 🙂") + [10] * 400 + tokenizer.encode(" and then 🙂 text")
    for ids in (text, [10] * 50, [10] * 20 + tokenizer.encode(" a 🙂") + [0, 10]):
        pieces, counts, decoded = served_pieces(tokenizer, ids)
        assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True)
        assert counts == list(range(1, len(ids) + 1))  # the skipped tokens count as completion tokens
        assert decoded <= 20 * len(ids), decoded  # each token's two windows: a few ids
    monkeypatch.setattr(detok, "SKIP_SPECIAL", False)
    pieces, counts, decoded = served_pieces(tokenizer, text)
    assert "".join(pieces) == tokenizer.decode(text, skip_special_tokens=True) and counts[-1] == len(text)
    assert decoded > 200 * len(text), decoded  # ... at the whole run decoded again at every token: caught
    monkeypatch.setattr(detok, "SKIP_SPECIAL", True)

    sp = metaspace_tokenizer()
    x = sp.convert_tokens_to_ids("<x>")
    hello, world, the = sp.encode("hello world the")
    ids = [x, hello, x, x, world, x, the, x]
    assert sp.decode(ids, skip_special_tokens=True) == "hello world the"
    assert served_pieces(sp, ids)[0] == ["", "hello", "", "", " world", "", " the", ""]
    monkeypatch.setattr(detok, "text_tokens", windows_end_at_special_tokens)
    assert "".join(served_pieces(sp, ids)[0]) == "helloworldthe"  # the words' spaces lost: caught


def test_startup_freeze_sets_the_collection_threshold():
    """freeze_startup_objects, which every server process calls once it is ready: what is alive then is never
    scanned again, and the youngest generation is collected only after `gc_threshold` net new objects
    (--gc-threshold), the older generations' thresholds kept; None leaves Python's own."""
    import gc

    from minisgl_edu.server.common import GC_LOG_MS, freeze_startup_objects
    before, callbacks = gc.get_threshold(), list(gc.callbacks)
    try:
        freeze_startup_objects("test", None)
        assert gc.get_threshold() == before and gc.get_freeze_count() > 0
        freeze_startup_objects("test", 10_000)
        assert gc.get_threshold() == (10_000, *before[1:])
        kept = [[] for _ in range(50)]  # tracked objects born after the freeze: counted toward the next collection
        assert gc.get_count()[0] >= 50 and kept
        # long collections are logged by default (20 ms), by one watcher however often the freeze runs
        assert GC_LOG_MS == 20 or "MINISGL_GC_LOG_MS" in os.environ
        assert sum(getattr(cb, "watches_gc", False) for cb in gc.callbacks) == (GC_LOG_MS > 0)
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        gc.callbacks[:] = callbacks


def thread_hops(app) -> list[str]:
    """The names of the callables FastAPI runs on a worker thread while it serves a request: every endpoint and
    dependency that is a plain `def` (FastAPI awaits an `async def` on the event loop). Each such call waits for a
    thread of anyio's pool and then for the GIL, which the API's busy event loop holds up to 5 ms at a time."""
    import inspect

    from fastapi.routing import APIRoute

    def walk(dependant):
        yield dependant.call
        for d in dependant.dependencies:
            yield from walk(d)
    return sorted({c.__name__ for r in app.routes if isinstance(r, APIRoute) for c in walk(r.dependant)
                   if c is not None and not inspect.iscoroutinefunction(c)})


def test_no_request_waits_for_a_worker_thread(model_path):
    """Every route of the API (and the API-key check guarding /v1) runs on the event loop. The key check was a plain
    `def` until 2026-12-04: each request hopped to a worker thread for it, and the first one imported anyio's thread
    machinery (19 ms on the H200, in a py-spy profile of the served load)."""
    from fastapi import Depends, Request

    from minisgl_edu.config import ServerConfig
    from minisgl_edu.server.api import create_app, health
    app = create_app(ServerConfig(model_path=model_path), None)
    assert thread_hops(app) == []

    def check_key(request: Request) -> None:  # the old, plain-def key check: caught
        return None
    app.add_api_route("/v1/old", health, methods=["GET"], dependencies=[Depends(check_key)])
    assert thread_hops(app) == ["check_key"]


def test_metrics_import_their_exporter_before_the_api_serves():
    """ServerMetrics (built with the API's Frontend, before it serves) imports prometheus_client: at the first scrape
    that import stalled the API's event loop, and every stream, ~30 ms on the H200 (py-spy, 2026-12-04)."""
    code = ("import sys\nfrom minisgl_edu.server.metrics import ServerMetrics\n"
            "assert 'prometheus_client' not in sys.modules\nm = ServerMetrics('x')\n"
            "assert m.exporter and 'prometheus_client.registry' in sys.modules\n"
            "before = set(sys.modules)\nm.render()\nprint(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "prometheus" not in out.stdout  # rendering imports nothing more of it


# ---- flags (no processes) ------------------------------------------------------------------------
def test_flags_are_config_fields_with_one_default(model_path):
    """serve's flags map onto ServerConfig by name; a flag not given keeps the dataclass default, so
    `serve` and `LLM(...)` start from the same defaults, and the same switches exist on both."""
    from dataclasses import fields

    from minisgl_edu.config import SchedulerConfig, ServerConfig
    from minisgl_edu.serve import parse_args
    cfg, shell = parse_args(["--model", model_path, "--device", "cpu"])
    plain = ServerConfig(model_path=model_path, device="cpu")
    assert cfg == plain and not shell and cfg.served_name == os.path.basename(model_path)
    cfg, _ = parse_args(["--model", model_path, "--device", "cpu", "--attention", "reference", "--no-fused-kernels",
                         "--no-overlap", "--context-length", "100", "--page-size", "4", "--hop-log", "h.jsonl",
                         "--moe-impl", "grouped", "--no-qk-kernel", "--no-gemv-kernel", "--no-pdl", "--no-skinny-gemm",
                         "--no-warm-start",
                         "--no-early-receive", "--early-admit", "--http-parser", "h11", "--gc-threshold", "700",
                         "--no-reply-socket"])
    changed = {f.name for f in fields(cfg) if getattr(cfg, f.name) != getattr(plain, f.name)}
    assert changed == {"attention", "fused_kernels", "overlap", "max_seq_len", "page_size", "hop_log", "moe_impl", "qk_kernel",
                       "gemv_kernel", "pdl", "skinny_gemm", "warm_start", "early_receive", "early_admit", "http_parser", "gc_threshold",
                       "reply_socket"}
    assert (cfg.attention, cfg.fused_kernels, cfg.overlap, cfg.max_seq_len) == ("reference", False, False, 100)
    with pytest.raises(ValueError, match="http_parser"):
        ServerConfig(model_path=model_path, device="cpu", http_parser="uvloop")
    with pytest.raises(ValueError, match="gc_threshold"):  # 0 would switch the collector off
        ServerConfig(model_path=model_path, device="cpu", gc_threshold=0)
    import minisgl_edu.config as config_mod
    real = config_mod._installed
    config_mod._installed = lambda m: m != "httptools" and real(m)  # a machine without the wheel
    try:
        with pytest.raises(ValueError, match="httptools package is not installed"):
            ServerConfig(model_path=model_path, device="cpu", http_parser="httptools")
        assert ServerConfig(model_path=model_path, device="cpu", http_parser="h11").http_parser == "h11"
    finally:
        config_mod._installed = real
    from minisgl_edu.server.queues import Addresses
    for on, scheme in ((True, "unix://"), (False, "ipc://")):  # the switch picks the replies' two inboxes' wire
        a = Addresses("/r", 1, on)
        assert a.detokenizer.startswith(scheme) and a.frontend.startswith(scheme) and a.scheduler.startswith("ipc://")
    llm_kw = {f.name for f in fields(SchedulerConfig)}
    assert {"attention", "fused_kernels", "qk_kernel", "gemv_kernel", "warm_start", "moe_impl", "overlap", "max_seq_len", "page_size", "trace", "tp",
            "reply_socket"} <= llm_kw


# ---- chapter 1: the replies' wire (plain UNIX sockets) --------------------------------------------
class OneReadOneMessage:
    """A wrong twin of `Frames`, kept: it takes each read for one whole message (the mistake a stream invites)."""

    def feed(self, data) -> list[bytes]:
        return [bytes(data[4:])] if len(data) >= 4 else []


def frames_deliver(make, messages: list[bytes], cuts: list[int]) -> bool:
    """Do `make()`'s frames, fed the framed messages cut at `cuts` (the `feed` exercise's own cutter), give back
    exactly `messages`, in order?"""
    from minisgl_edu.exercises.graders.ch01 import cut_reads
    frames = make()
    return [m for data in cut_reads(messages, cuts) for m in frames.feed(memoryview(data))] == messages


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12), st.lists(st.integers(0, 10_000), max_size=20))
def test_frames_give_whole_messages_however_the_reads_cut_them(messages, cuts):
    from minisgl_edu.server.queues import Frames
    assert frames_deliver(Frames, messages, cuts)


def test_frames_check_catches_a_reader_that_takes_each_read_for_a_message():
    from minisgl_edu.server.queues import Frames
    two = [b"step 1 tokens", b"step 2 tokens"]
    assert frames_deliver(Frames, two, []) and not frames_deliver(OneReadOneMessage, two, [])  # both in one read
    assert not frames_deliver(OneReadOneMessage, [b"a long message"], [9])  # one message in two reads


def test_reply_socket_carries_every_message_in_order(tmp_path):
    """Senders that start before the receiver binds, two senders at once, a 5 MiB message and an empty one, the
    receiver's timeouts, and a sender whose receiver has gone (it drops, as ZMQ does, and never raises)."""
    import multiprocessing as mp

    from minisgl_edu.server.queues import SocketOutbox, pull, push
    addr = f"unix://{tmp_path}/inbox"
    assert isinstance(push(addr), SocketOutbox)  # the scheme picks the wire; connecting waits for the first message
    ctx = mp.get_context("spawn")
    senders = [ctx.Process(target=send_numbered, args=(addr, name, 300)) for name in ("a", "b")]
    for p in senders:
        p.start()  # both connect (and wait) before anyone listens
    time.sleep(0.3)
    inbox = pull(addr)
    seen: dict[str, list[int]] = {"a": [], "b": []}
    big = None
    while len(seen["a"]) + len(seen["b"]) < 600 or big is None:
        raw = inbox.get_raw(timeout_ms=30_000)
        assert raw is not None, "a message never came"
        if len(raw) > 1000:
            big = raw
            continue
        name, _, i = raw.decode().partition(":")
        seen[name].append(int(i))
    for p in senders:
        p.join(30)
    assert seen == {"a": list(range(300)), "b": list(range(300))}  # each sender's messages in its order
    assert big == bytes(range(256)) * (5 << 12)  # 5 MiB, whole (from sender a, after its 300)
    assert inbox.get_raw(timeout_ms=50) is None and inbox.drain_raw() == [] and not inbox.ready()
    out = push(addr)
    out.put_raw(b"")
    assert inbox.get_raw(timeout_ms=5000) == b""  # an empty message is a message
    inbox.close()
    for _ in range(3):
        out.put_raw(b"after the receiver closed" * 10_000)  # dropped, no exception
    assert out.gone


def send_numbered(addr: str, name: str, n: int) -> None:
    from minisgl_edu.server.queues import push
    out = push(addr)
    for i in range(n):
        out.put_raw(f"{name}:{i}".encode())
    if name == "a":
        out.put_raw(bytes(range(256)) * (5 << 12))
    out.close()


# ---- the default server --------------------------------------------------------------------------
def test_openai_client_stream_equals_nonstream_equals_offline(server, llm):
    from openai import OpenAI
    client = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    expect = llm.generate([QUESTION], SamplingParams(max_tokens=N), chat=True, use_tqdm=False)[0]
    full = client.chat.completions.create(model="SmolLM2-135M-Instruct", temperature=0, max_tokens=N,
                                          messages=[{"role": "user", "content": QUESTION}])
    text = full.choices[0].message.content
    stream = client.chat.completions.create(model="SmolLM2-135M-Instruct", temperature=0, max_tokens=N,
                                            messages=[{"role": "user", "content": QUESTION}], stream=True,
                                            stream_options={"include_usage": True})
    parts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    assert text == "".join(parts) == expect["text"]
    assert full.choices[0].finish_reason == finish == expect["finish_reason"]
    assert full.usage.completion_tokens == usage.completion_tokens == len(expect["token_ids"])
    assert full.usage.prompt_tokens == usage.prompt_tokens == expect["prompt_tokens"]
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens
    assert len([p for p in parts if p]) > 1  # it really streamed, token by token


def test_completions_stop_strings_and_models(server, llm):
    prompt = "1, 2, 3, 4,"
    expect = llm.generate([prompt], SamplingParams(max_tokens=12), use_tqdm=False)[0]
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=300).json()
    assert r["choices"][0]["text"] == expect["text"]
    assert r["choices"][0]["finish_reason"] == expect["finish_reason"]
    assert stream_text(server.url + "/v1/completions", body)[0] == expect["text"]
    stop = expect["text"][len(expect["text"]) // 2:][:3]  # a stop string from the middle of the answer
    assert stop.strip(), expect["text"]
    cut = expect["text"][:expect["text"].index(stop)]
    for text in (httpx.post(server.url + "/v1/completions", json={**body, "stop": [stop]}, timeout=300)
                 .json()["choices"][0]["text"], stream_text(server.url + "/v1/completions", {**body, "stop": stop})[0]):
        assert text == cut
    models = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct"]


def test_16_concurrent_streams(server, llm):
    concurrent_streams(server, llm, 16)


def test_the_zmq_reply_twin_streams_the_same_text(llm):
    """`--no-reply-socket`: the replies go scheduler -> detokenizer -> API over ZMQ, as before; same streams."""
    s = Server("--context-length", "1024", "--max-total-tokens", "16384", "--no-reply-socket")
    try:
        concurrent_streams(s, llm, 8)
    finally:
        s.stop()
    assert s.proc.returncode == 0 and no_survivors(s.children)


def concurrent_streams(server, llm, n: int) -> None:
    prompts = [f"Count from {i} to {i + 5}, separated by commas:" for i in range(n)]
    expect = llm.generate(prompts, SamplingParams(max_tokens=16), use_tqdm=False)
    got: dict[int, tuple[str, list[dict]]] = {}
    errors = []

    def run(i: int) -> None:
        try:
            got[i] = stream_text(server.url + "/v1/completions", {"prompt": prompts[i], "max_tokens": 16,
                                                                  "temperature": 0})
        except Exception as e:  # surfaced below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    ids = set()
    for i in range(n):
        text, chunks = got[i]
        assert text == expect[i]["text"], i
        assert len({c["id"] for c in chunks}) == 1  # one request's chunks only
        ids |= {c["id"] for c in chunks}
    assert len(ids) == n


BAD = [
    ("invalid JSON", b"{not json", 400),
    ("not an object", b"[1, 2]", 422),
    ("missing messages", {"max_tokens": 4}, 422),
    ("messages wrong type", {"messages": "hello"}, 422),
    ("content wrong type", {"messages": [{"role": "user", "content": 5}]}, 422),
    ("max_tokens wrong type", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, 422),
    ("empty messages", {"messages": []}, 400),
    ("max_tokens 0", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400),
    ("max_tokens negative", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -5}, 400),
    ("temperature < 0", {"messages": [{"role": "user", "content": "hi"}], "temperature": -0.1}, 400),
    ("top_p 0", {"messages": [{"role": "user", "content": "hi"}], "top_p": 0}, 400),
    ("top_p > 1", {"messages": [{"role": "user", "content": "hi"}], "top_p": 1.5}, 400),
    ("n > 16", {"messages": [{"role": "user", "content": "hi"}], "n": 17}, 400),
    ("top_logprobs > 20", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21}, 400),
    ("unknown field", {"messages": [{"role": "user", "content": "hi"}], "max_token": 4}, 400),
    ("prompt longer than the context", {"messages": [{"role": "user", "content": "hello " * 9000}]}, 413),
    ("unknown model", {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-9"}, 404),
]


def test_bad_inputs_get_4xx_json_and_the_server_keeps_serving(server, llm):
    for name, body, status in BAD:
        kw = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
            else {"json": body}
        for stream in (False, True):
            if stream and isinstance(body, dict):
                kw = {"json": {**body, "stream": True}}
            r = httpx.post(server.url + "/v1/chat/completions", timeout=300, **kw)
            assert r.status_code == status, (name, r.status_code, r.text)
            err = r.json()["error"]
            assert err["message"] and err["type"], name
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "", "max_tokens": 4}, timeout=60)
    assert r.status_code == 400
    # an absurd max_tokens is clamped to the context, with a warning, not refused
    r = httpx.post(server.url + "/v1/chat/completions", json=chat_body(QUESTION, max_tokens=10**30), timeout=300)
    assert r.status_code == 200 and "max_tokens" in r.headers["x-minisgl-warning"]
    assert r.json()["warnings"] and r.json()["choices"][0]["finish_reason"] == "stop"
    # and the server still answers correctly
    expect = llm.generate([QUESTION], SamplingParams(max_tokens=N), chat=True, use_tqdm=False)[0]["text"]
    r = httpx.post(server.url + "/v1/chat/completions", json=chat_body(QUESTION), timeout=300)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == expect
    assert httpx.get(server.url + "/health").status_code == 200


def stats(url: str) -> dict:
    return httpx.get(url + "/debug/stats", timeout=60).json()


def test_client_disconnect_aborts_and_frees_pages(server):
    body = chat_body("Write a very long story about a dragon.", max_tokens=4000, ignore_eos=True, stream=True)
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=300) as r:
        seen, during = 0, None
        for line in r.iter_lines():
            seen += line.startswith("data: ")
            if seen == 4:  # still reading: the request is live and holds pages
                during = stats(server.url)
            if seen >= 6:
                break  # leaving the iterator closes the connection (httpx), as a client that goes away
    assert during["live_reqs"] == 1 and during["integrity"] == "busy"
    # the connection is closed: the API sends AbortMsg, the scheduler frees the request's pages
    deadline = time.monotonic() + 30
    while (s := stats(server.url))["live_reqs"] != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert s["live_reqs"] == 0 and s["integrity"] == "ok", s
    assert s["free_pages"] + s["cached_pages"] == s["num_pages"]


# ---- TP ranks, the API key, and a dying worker ---------------------------------------------------
def test_tp3_key_and_watchdog(llm):
    # the default model has 9 query heads and 3 KV heads: tp=3 is the smallest split it allows
    srv = Server("--tp", "3", "--api-key", "s3cret", "--num-tokenizers", "2")
    try:
        key = {"Authorization": "Bearer s3cret"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = httpx.post(srv.url + "/v1/chat/completions", json=chat_body(QUESTION), headers=headers, timeout=60)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(srv.url + "/v1/models").status_code == 401
        assert httpx.get(srv.url + "/health").status_code == 200  # health is not guarded
        # 8 tokens, not N: every tp=3 step all-reduces over gloo
        expect = llm.generate([QUESTION], SamplingParams(max_tokens=8), chat=True, use_tqdm=False)[0]["text"]
        body = chat_body(QUESTION, max_tokens=8)
        r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers=key, timeout=300)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == expect
        assert stream_text(srv.url + "/v1/chat/completions", body, key)[0] == expect
        assert len(srv.children) >= 3 + 2 + 1  # 3 ranks, 2 tokenizers, 1 detokenizer (+ resource tracker)
        pids = httpx.get(srv.url + "/health").json()["workers"]
        assert sorted(pids) == ["detokenizer", "scheduler-rank0", "scheduler-rank1", "scheduler-rank2",
                                "tokenizer-0", "tokenizer-1"]

        # a long request in flight when the scheduler dies must end with an error, not hang
        in_flight: dict = {}

        def long_request() -> None:
            body = chat_body("Tell me a long story.", max_tokens=4000, ignore_eos=True, stream=True)
            try:
                with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, headers=key, timeout=60) as r:
                    for line in r.iter_lines():
                        in_flight["chunks"] = in_flight.get("chunks", 0) + 1
                        if '"error"' in line:
                            in_flight["error"] = line
            except httpx.HTTPError as e:
                in_flight["error"] = repr(e)
        t = threading.Thread(target=long_request)
        t.start()
        deadline = time.monotonic() + 120
        while in_flight.get("chunks", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)

        # kill scheduler rank 0: /health turns 503, the launcher exits non-zero within 10 s, no child survives
        t0 = time.monotonic()
        psutil.Process(pids["scheduler-rank0"]).kill()
        saw_503 = False
        while srv.proc.poll() is None and time.monotonic() - t0 < 15:
            try:
                saw_503 |= httpx.get(srv.url + "/health", timeout=1).status_code == 503
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        assert srv.proc.poll() not in (None, 0) and elapsed < 10, (srv.proc.returncode, elapsed)
        assert saw_503
        t.join(30)
        assert "error" in in_flight, in_flight
        assert no_survivors(srv.children)
    finally:
        srv.stop()


def test_startup_failure_names_the_process(tmp_path):
    from tiny_model import tiny_model_dir
    path = tiny_model_dir(str(tmp_path))  # a config-only folder: the engine runs, but there is no tokenizer
    r = subprocess.run([sys.executable, "-m", "minisgl_edu.serve", "--model", path, "--dummy-weights",
                        "--port", str(free_port())], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "error: tokenizer-0" in r.stderr or "error: detokenizer" in r.stderr, r.stderr[-2000:]
    assert "failed to start" in r.stderr


def test_workers_exit_when_the_launcher_is_killed(tmp_path, model_path):
    import shutil
    from tiny_model import tiny_model_dir
    path = tiny_model_dir(str(tmp_path))  # random weights start fast; the default model's tokenizer makes it servable
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(model_path, f), path)
    srv = Server("--model", path, "--dummy-weights")
    try:
        assert len(srv.children) >= 3
        srv.proc.kill()  # SIGKILL: the launcher gets no chance to stop anyone
        srv.proc.wait(10)
        assert no_survivors(srv.children)  # each worker saw its parent change and left
    finally:
        srv.stop()
