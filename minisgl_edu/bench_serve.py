"""Chapter 9 — the serving benchmark: how fast does a server answer many clients at once?

`python -m minisgl_edu.bench serve|offline|compare`: the metrics, what counts as a failed request and
the generated workloads are on chapter 9's page ("Measuring it"). ITL counts a chunk of k token ids
as k gaps of a k-th of its gap each, as SGLang's benchmark does.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field

WORDS = ("the of and to in is that for it as with was on be by at this from or are an have not they which one "
         "you were all we she there can their has been more will if would when what so about up out into some "
         "time them only other new these two may first then do any like my now over such our man me even most "
         "made after also did many off before must well back through years much where your way down should").split()


@dataclass
class BenchRequest:
    prompt: list[int] | str  # token ids (`--prompt-mode ids`) or text
    prompt_len: int  # tokens (for text: the token ids it was made from)
    output_len: int  # max_tokens; ignore_eos makes it the exact output length


@dataclass
class RequestResult:
    ok: bool
    error: str | None = None
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = 0.0  # seconds
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)
    start: float = 0.0  # seconds from the benchmark's start
    clock: str = "read"  # what ttft and itl were timed by: "kernel" (every read stamped on arrival) or "read"
    ttft_read: float = 0.0  # the same two, timed by when this client's loop got to each read (the old clock)
    itl_read: list[float] = field(default_factory=list)
    shared_reads: int = 0  # events that came in one read with a later event of theirs: timed by the later one's arrival


# ---- datasets ------------------------------------------------------------------------------------
def random_requests(n: int, seed: int = 0, input_len=(100, 1024), output_len=(100, 1024),
                    vocab: int = 10000) -> list[BenchRequest]:
    """The anchors' workload (bench.anchors_workload when the ranges are the defaults): prompts of
    randint(*input_len) ids from randint(0, vocab), then the n output lengths, from one seeded RNG."""
    rng = random.Random(seed)
    prompts = [[rng.randint(0, vocab) for _ in range(rng.randint(*input_len))] for _ in range(n)]
    outputs = [rng.randint(*output_len) for _ in range(n)]
    return [BenchRequest(p, len(p), o) for p, o in zip(prompts, outputs)]


def shared_prefix_requests(n: int, seed: int = 0, groups: int = 4, system_len: int = 512,
                           question_len=(16, 64), output_len=(100, 1024), vocab: int = 10000) -> list[BenchRequest]:
    """`groups` system prompts of system_len ids, each shared by n / groups questions: a prefix cache
    serves every request of a group after its first one from the cached system prompt."""
    rng = random.Random(seed)
    systems = [[rng.randint(0, vocab) for _ in range(system_len)] for _ in range(groups)]
    out = []
    for i in range(n):
        p = systems[i % groups] + [rng.randint(0, vocab) for _ in range(rng.randint(*question_len))]
        out.append(BenchRequest(p, len(p), rng.randint(*output_len)))
    return out


def sharegpt_like_requests(n: int, seed: int = 0, input_len=(4, 2048), output_len=(4, 1024),
                           vocab: int = 10000) -> list[BenchRequest]:
    """Chat-log-shaped lengths, generated here: log-normal with its median at the geometric middle of
    each range and the range at +-2 sigma, clipped (many short turns, a long tail of long ones)."""
    rng = random.Random(seed)

    def draw(lo: int, hi: int) -> int:
        mu, sigma = math.log(math.sqrt(lo * hi)), math.log(hi / lo) / 4 if hi > lo else 0.0
        return min(hi, max(lo, round(rng.lognormvariate(mu, sigma))))
    out = []
    for _ in range(n):
        p = [rng.randint(0, vocab) for _ in range(draw(*input_len))]
        out.append(BenchRequest(p, len(p), draw(*output_len)))
    return out


def as_text(reqs: list[BenchRequest], tokenizer_path: str | None = None, seed: int = 0) -> list[BenchRequest]:
    """--prompt-mode text: the same prompts as strings. With a tokenizer the ids are decoded; without,
    each id becomes a common English word (about one token each for BPE tokenizers)."""
    if tokenizer_path:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(tokenizer_path)
        return [BenchRequest(tok.decode([t % tok.vocab_size for t in r.prompt]), r.prompt_len, r.output_len)
                for r in reqs]
    rng = random.Random(seed)
    return [BenchRequest(" ".join(rng.choice(WORDS) for _ in r.prompt), r.prompt_len, r.output_len) for r in reqs]


def make_requests(args) -> list[BenchRequest]:
    lo_in, hi_in = args.input_len or ((4, 2048) if args.dataset == "sharegpt" else (100, 1024))
    lo_out, hi_out = args.output_len or ((4, 1024) if args.dataset == "sharegpt" else (100, 1024))
    if args.dataset == "random":
        reqs = random_requests(args.num_prompts, args.seed, (lo_in, hi_in), (lo_out, hi_out), args.vocab)
    elif args.dataset == "shared-prefix":
        reqs = shared_prefix_requests(args.num_prompts, args.seed, args.groups, args.system_len, (lo_in, hi_in),
                                      (lo_out, hi_out), args.vocab)
    else:
        reqs = sharegpt_like_requests(args.num_prompts, args.seed, (lo_in, hi_in), (lo_out, hi_out), args.vocab)
    return as_text(reqs, args.tokenizer, args.seed) if args.prompt_mode == "text" else reqs


# ---- one streamed request ------------------------------------------------------------------------
def parse_sse_line(line: str):
    """One SSE line -> None (not data), "[DONE]", or the decoded JSON object."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    return data if data == "[DONE]" else json.loads(data)


class SSEStats:
    """What one stream's events said so far: token count, first-token and inter-token times, the end. Times come
    in twice: when the bytes arrived (`now`) and when this client's loop got to them (`read_at`)."""

    def __init__(self, res: RequestResult, start: float):
        self.res, self.chunks, self.done, self.start = res, 0, False, start
        self.last = self.last_read = self.end = start

    def feed(self, lines: list[bytes], now: float, read_at: float | None = None) -> bool:
        """Take complete SSE lines that arrived at `now`; True once the stream is over (done or an error chunk)."""
        res, read_at, events = self.res, now if read_at is None else read_at, 0
        for line in lines:
            obj = parse_sse_line(line.decode())
            if obj is None:
                continue
            if obj == "[DONE]":
                self.done, self.end = True, now
                return True
            if "error" in obj:
                res.error = f"error chunk: {obj['error']}"
                return True
            if obj.get("usage"):
                res.output_tokens = obj["usage"]["completion_tokens"]
                res.prompt_len = obj["usage"]["prompt_tokens"] or res.prompt_len
            choice = (obj.get("choices") or [{}])[0]
            k = len(choice.get("token_ids") or ()) or (1 if choice.get("text") else 0)
            if k == 0:
                continue
            events += 1
            res.shared_reads += events > 1  # the one before it shared this read (and its stamp)
            if self.chunks == 0:
                res.ttft, res.ttft_read = now - self.start, read_at - self.start
            else:
                res.itl.extend([(now - self.last) / k] * k)
                res.itl_read.extend([(read_at - self.last_read) / k] * k)
            self.last, self.last_read, self.chunks = now, read_at, self.chunks + k
        return False


def request_body(model: str, req: BenchRequest) -> dict:
    return {"model": model, "prompt": req.prompt, "max_tokens": req.output_len, "temperature": 0.0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def send_one(client, model: str, req: BenchRequest, t0: float) -> RequestResult:
    """Stream one completion; time its chunks. Never raises: a failure is a RequestResult(ok=False).
    `client` is an httpx.AsyncClient (the naive twin) or a RawClient (plain http://, a fraction of the CPU)."""
    res = RequestResult(False, prompt_len=req.prompt_len)
    start = time.perf_counter()
    res.start = start - t0
    sse = SSEStats(res, start)
    try:
        async with client.stream("POST", "/v1/completions", json=request_body(model, req)) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
                return res
            buf = b""
            async for data in r.aiter_raw():  # raw reads, split here: cheaper than aiter_lines per event
                read_at = time.perf_counter()
                *lines, buf = (buf + data).split(b"\n")
                if sse.feed(lines, getattr(r, "arrival", read_at), read_at):  # what one read brings arrived together
                    break
            res.clock = getattr(r, "clock", "read")
    except Exception as e:  # a dropped connection, a malformed chunk, a timeout
        res.error = f"{type(e).__name__}: {e}"
        return res
    if res.error is not None:
        return res
    res.e2e = sse.end - start  # [DONE]'s arrival, on the clock of ttft and itl
    if not sse.done:
        res.error = "the stream ended without [DONE]"
        return res
    res.output_tokens = res.output_tokens or sse.chunks
    res.ok = True
    return res


# ---- a client cheap enough not to be the bottleneck -----------------------------------------------
class Dechunk:
    """HTTP/1.1 chunked transfer decoding, incrementally: feed bytes, get the payload that is complete."""

    def __init__(self):
        self.buf, self.done = b"", False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = []
        while not self.done:
            eol = self.buf.find(b"\r\n")
            if eol < 0:
                break
            size = int(self.buf[:eol].split(b";")[0], 16)
            if len(self.buf) < eol + 2 + size + 2:
                break  # the chunk has not fully arrived
            out.append(self.buf[eol + 2:eol + 2 + size])
            self.buf = self.buf[eol + 2 + size + 2:]
            self.done = size == 0
        return b"".join(out)


# Linux's SO_TIMESTAMPNS (Python's socket module does not name it): the kernel stamps every packet it receives
SO_TIMESTAMPNS = 35
STAMP_SPACE = socket.CMSG_SPACE(16)  # room for one struct timespec


def arrival_of(anc: list, read_at: float) -> float | None:
    """When the bytes of one recvmsg reached this machine, on perf_counter's clock: `read_at` (perf_counter, right
    after the read) minus their age (the wall clock now minus the kernel's stamp, which is wall-clock time; TCP
    stamps what one read returns with its last packet's arrival). None if the read carried no stamp."""
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, ns = struct.unpack("qq", data[:16])
            return read_at - max(0.0, time.time() - (sec + ns * 1e-9))
    return None


class StampedStream:
    """One TCP connection, read with recvmsg so that every read says when its bytes arrived (chapter 9): the
    kernel's receive time (SO_TIMESTAMPNS, Linux), not when this event loop got round to the stream. A loop that
    reads forty streams one after another stamps the last ones late by the parsing of the others; the kernel's
    stamp does not move with that. `stamped=False` (or no stamp in a read) keeps the read time: the twin."""

    def __init__(self, sock: socket.socket, stamped: bool):
        self.sock, self.loop = sock, asyncio.get_running_loop()
        self.stamped = stamped and sys.platform.startswith("linux")
        if self.stamped:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.clock = "kernel" if self.stamped else "read"  # becomes "read" if any read comes without a stamp
        self.arrival = 0.0  # of the last read, on perf_counter's clock
        self.pending = b""  # bytes read past the response head
        self.wake: asyncio.Future | None = None
        self.loop.add_reader(sock.fileno(), self._readable)  # registered once: no epoll change per read

    def _readable(self) -> None:
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)

    async def read(self, n: int = 1 << 16) -> bytes:
        if self.pending:
            data, self.pending = self.pending, b""
            return data
        while True:
            try:
                data, anc, _, _ = self.sock.recvmsg(n, STAMP_SPACE if self.stamped else 0)
            except (BlockingIOError, InterruptedError):
                self.wake = self.loop.create_future()
                await self.wake
                continue
            read_at = time.perf_counter()
            arrival = arrival_of(anc, read_at) if self.stamped and data else None
            if arrival is None and self.stamped and data:
                self.clock = "read"
            self.arrival = read_at if arrival is None else arrival
            return data

    async def read_head(self) -> bytes:
        """The response head, up to its blank line; what came after it is the body's first bytes."""
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = await self.read()
            if not data:
                raise ConnectionError("the connection closed before the response head")
            buf += data
        head, _, self.pending = buf.partition(b"\r\n\r\n")
        return head

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


class RawResponse:
    def __init__(self, stream: StampedStream, status_code: int, headers: dict[str, str]):
        self.stream, self.status_code, self.headers = stream, status_code, headers
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.length = int(headers["content-length"]) if "content-length" in headers else None

    @property
    def arrival(self) -> float:
        """When the bytes of the last read arrived (perf_counter's clock): what send_one times events by."""
        return self.stream.arrival

    @property
    def clock(self) -> str:
        return self.stream.clock

    async def aiter_raw(self):
        dechunk, left = Dechunk(), self.length
        while not dechunk.done and left != 0:
            data = await self.stream.read(1 << 16)
            if not data:
                if self.chunked or (left or 0) > 0:
                    raise ConnectionError("the connection closed mid-body")
                return
            if self.chunked:
                data = dechunk.feed(data)
            elif left is not None:
                left -= len(data)
            if data:
                yield data

    async def aread(self) -> bytes:
        return b"".join([d async for d in self.aiter_raw()])


class RawClient:
    """Just enough HTTP/1.1 over plain sockets for the load (http:// only, one connection per request):
    httpx's layers (httpcore, h11, anyio) cost ~100 us of CPU per streamed event, which made the client,
    not the server, the ceiling at ~10k tokens/s. httpx stays the twin (`--http-client httpx`). Each read is
    timed by its arrival (`StampedStream`; `stamped=False`: by the read, the twin)."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float, stamped: bool = True):
        from urllib.parse import urlsplit
        u = urlsplit(base_url)
        if u.scheme != "http":
            raise ValueError(f"the raw client speaks plain http:// only, not {base_url!r} (use --http-client httpx)")
        self.host, self.port, self.prefix = u.hostname, u.port or 80, u.path.rstrip("/")
        self.headers, self.timeout, self.stamped = headers, timeout, stamped

    async def connect(self) -> socket.socket:
        loop = asyncio.get_running_loop()
        family, kind, proto, _, addr = (await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM))[0]
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), 30)
        except BaseException:
            sock.close()
            raise
        return sock

    def stream(self, method: str, path: str, json=None):
        import contextlib
        import json as jsonlib

        @contextlib.asynccontextmanager
        async def cm():
            sock = await self.connect()
            stream = None
            try:
                body = jsonlib.dumps(json).encode() if json is not None else b""
                head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                        "Connection: close", "Accept: text/event-stream", f"Content-Length: {len(body)}"]
                head += ["Content-Type: application/json"] if json is not None else []
                head += [f"{k}: {v}" for k, v in self.headers.items()]
                stream = StampedStream(sock, self.stamped)
                await asyncio.get_running_loop().sock_sendall(sock, ("\r\n".join(head) + "\r\n\r\n").encode() + body)
                raw = await asyncio.wait_for(stream.read_head(), self.timeout)
                lines = raw.decode("latin-1").split("\r\n")
                status = int(lines[0].split()[1])
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                yield RawResponse(stream, status, headers)
            finally:
                if stream is not None:
                    stream.close()
                else:
                    sock.close()
        return cm()

    async def get(self, path: str):
        async with self.stream("GET", path) as r:
            body = await r.aread()
        return RawGet(r.status_code, body)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None


@dataclass
class RawGet:
    status_code: int
    content: bytes

    def json(self):
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if self.status_code != 200:
            raise RuntimeError(f"HTTP {self.status_code}: {self.content[:200]!r}")


# ---- the load ------------------------------------------------------------------------------------
def arrival_times(n: int, request_rate: float = math.inf, seed: int = 0) -> list[float]:
    """Seconds from the load's start at which each request is sent: all 0 (all at once), or a Poisson process
    (exponential gaps from one seeded RNG). Fixed in advance, so a late event loop does not push every later arrival."""
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(t)
        if math.isfinite(request_rate):
            t += rng.expovariate(request_rate)
    return out


async def run_load(base_url: str, reqs: list[BenchRequest], request_rate: float = math.inf,
                   max_concurrency: int | None = None, model: str | None = None, seed: int = 0,
                   progress: bool = True, api_key: str | None = None, timeout: float = 3600.0,
                   scrape_interval: float | None = None, http_client: str = "raw", arrival_clock: str = "kernel", *,
                   arrivals: list[float] | None = None, start_at=None,
                   on_done=None) -> tuple[list[RequestResult], float]:
    """Send every request at its arrival time (default: `arrival_times`); return results and seconds.
    arrival_clock "kernel": the raw client times each read by when its bytes arrived; "read": when it read them.
    A shard of `run_load_sharded` passes its own arrivals, `start_at` (the readiness callback that returns the
    shared start, a perf_counter reading) and `on_done` (called per finished request, in place of the bar)."""
    import httpx
    from tqdm.auto import tqdm
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    if http_client == "raw" and not base_url.startswith("http://"):
        http_client = "httpx"  # https and the rest: the general client
    if arrival_clock not in ("kernel", "read"):
        raise ValueError(f"arrival_clock must be 'kernel' or 'read', not {arrival_clock!r}")
    stamped = arrival_clock == "kernel"
    client = RawClient(base_url, headers, timeout, stamped) if http_client == "raw" else httpx.AsyncClient(
        base_url=base_url, timeout=httpx.Timeout(timeout, connect=30.0), limits=limits, headers=headers)
    arrivals = arrival_times(len(reqs), request_rate, seed) if arrivals is None else arrivals
    async with client:
        if model is None:
            r = await client.get("/v1/models")
            r.raise_for_status()
            model = r.json()["data"][0]["id"]
        gate = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        bar = tqdm(total=len(reqs), desc="requests", unit="req", disable=not progress)
        t0 = time.perf_counter() if start_at is None else start_at()  # perf_counter is one clock for every process

        async def one(req: BenchRequest) -> RequestResult:
            if gate is None:
                res = await send_one(client, model, req, t0)
            else:
                async with gate:
                    res = await send_one(client, model, req, t0)
            bar.update(1)
            if on_done is not None:
                on_done()
            return res
        scraper = asyncio.create_task(scrape(client, scrape_interval)) if scrape_interval else None
        tasks = []
        for req, at in zip(reqs, arrivals):
            if (wait := t0 + at - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(one(req)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - t0
        if scraper is not None:
            scraper.cancel()
        bar.close()
    return list(results), duration


def shard(items: list, i: int, n: int) -> list:
    """Client process i's share of n: items i, i + n, i + 2n, ... (each process sees arrivals all through the run)."""
    return items[i::n]


def unshard(parts: list[list]) -> list:
    """The processes' shares back in request order: the inverse of `shard` over i = 0 .. len(parts) - 1."""
    out = [None] * sum(map(len, parts))
    for i, part in enumerate(parts):
        out[i::len(parts)] = part
    return out


def _load_shard(conn, base_url: str, reqs: list[BenchRequest], arrivals: list[float], kwargs: dict) -> None:
    """One client process of `run_load_sharded`: ready -> the shared start -> ticks -> its results and CPU seconds."""
    cpu0 = 0.0
    try:
        def start_at() -> float:
            nonlocal cpu0
            conn.send(("ready",))
            t0 = conn.recv()
            cpu0 = time.process_time()  # the load's CPU from here: the process's start (imports, ~1 s) is not it
            return t0
        results, _ = asyncio.run(run_load(base_url, reqs, progress=False, arrivals=arrivals, start_at=start_at,
                                          on_done=lambda: conn.send(("tick",)), **kwargs))
        conn.send(("done", results, time.perf_counter(), time.process_time() - cpu0))
    except BaseException as e:  # the parent must hear of it, not wait for ever
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def run_load_sharded(base_url: str, reqs: list[BenchRequest], client_procs: int, request_rate: float = math.inf,
                     max_concurrency: int | None = None, model: str | None = None, seed: int = 0,
                     progress: bool = True, api_key: str | None = None, timeout: float = 3600.0,
                     scrape_interval: float | None = None, http_client: str = "raw",
                     arrival_clock: str = "kernel") -> tuple[list[RequestResult], float, float]:
    """run_load over `client_procs` processes (request i in process i % client_procs), one shared start and one
    arrival schedule: (results in request order, seconds, the client processes' CPU seconds). One event loop reads
    a step's burst of events one stream at a time, so the last stream's clock reading waits for the others' parsing
    (chapter 9); several loops shorten that wait. max_concurrency is split between the processes."""
    import multiprocessing as mp
    from multiprocessing.connection import wait
    from tqdm.auto import tqdm
    if max_concurrency is not None and max_concurrency < client_procs:
        raise ValueError(f"--max-concurrency {max_concurrency} is below --client-procs {client_procs}: "
                         "each client process needs at least one request in flight")
    arrivals = arrival_times(len(reqs), request_rate, seed)
    ctx, procs, conns = mp.get_context("spawn"), [], []
    for i in range(client_procs):
        conc = None if max_concurrency is None else max_concurrency // client_procs + (i < max_concurrency % client_procs)
        kwargs = dict(max_concurrency=conc, model=model, api_key=api_key, timeout=timeout, http_client=http_client,
                      arrival_clock=arrival_clock,
                      scrape_interval=scrape_interval if i == 0 else None)  # one scraper is a Prometheus server
        ours, theirs = ctx.Pipe()
        procs.append(ctx.Process(target=_load_shard, daemon=True,
                                 args=(theirs, base_url, shard(reqs, i, client_procs), shard(arrivals, i, client_procs),
                                       kwargs)))
        procs[-1].start()
        theirs.close()
        conns.append(ours)
    parts: list[list[RequestResult]] = [[] for _ in conns]
    ends, cpu = [], 0.0
    bar = tqdm(total=len(reqs), desc="requests", unit="req", disable=not progress)
    try:
        for c in conns:  # every process connected, imported and asked the model name: then one start for all
            msg = c.recv()
            if msg[0] != "ready":
                raise RuntimeError(f"a client process failed before the start: {msg[1]}")
        t0 = time.perf_counter() + 0.01
        for c in conns:
            c.send(t0)
        live = {c: i for i, c in enumerate(conns)}
        while live:
            for c in wait(list(live)):
                try:
                    msg = c.recv()
                except EOFError:
                    raise RuntimeError("a client process died mid-load") from None
                if msg[0] == "tick":
                    bar.update(1)
                elif msg[0] == "done":
                    parts[live.pop(c)] = msg[1]
                    ends.append(msg[2])
                    cpu += msg[3]
                else:
                    raise RuntimeError(f"a client process failed: {msg[1]}")
    finally:
        bar.close()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return unshard(parts), max(ends) - t0, cpu


async def scrape(client, interval: float) -> None:
    """GET /metrics every `interval` seconds (what a Prometheus server does, only more often)."""
    while True:
        await asyncio.sleep(interval)
        (await client.get("/metrics")).raise_for_status()


def stats_ms(xs: list[float]) -> dict:
    """mean, median, p90, p99 of seconds, in milliseconds (zeros when empty)."""
    if not xs:
        return {"mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    s = sorted(xs)

    def pct(q: float) -> float:  # linear interpolation, as numpy.percentile
        i = (len(s) - 1) * q
        lo = int(i)
        return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (i - lo)
    return {"mean": 1e3 * statistics.fmean(s), "median": 1e3 * pct(0.5), "p90": 1e3 * pct(0.9),
            "p99": 1e3 * pct(0.99)}


def summarize(results: list[RequestResult], duration: float) -> dict:
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_len for r in ok)
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    return {
        "completed": len(ok), "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:10],
        "duration_s": duration, "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration, "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "ttft_ms": stats_ms([r.ttft for r in ok]), "tpot_ms": stats_ms(tpot),
        "itl_ms": stats_ms([x for r in ok for x in r.itl]), "e2e_ms": stats_ms([r.e2e for r in ok]),
        # what ttft and itl were timed by, and the same two by the read time (the clock before arrival stamps)
        "arrival_clock": clock_of(ok), "ttft_read_ms": stats_ms([r.ttft_read for r in ok]),
        "itl_read_ms": stats_ms([x for r in ok for x in r.itl_read]),
        # events read together with a later event of their stream: the arrival stamp is the later one's (TCP stamps a
        # read by its last packet), so these few are timed late by both clocks
        "shared_read_pct": 100 * sum(r.shared_reads for r in ok) / max(1, sum(len(r.itl) + 1 for r in ok if r.itl)),
    }


def clock_of(results: list[RequestResult]) -> str:
    """"kernel" if every request was timed by its reads' arrival, "read" if none was, else "mixed"."""
    clocks = {r.clock for r in results}
    return clocks.pop() if len(clocks) == 1 else ("mixed" if clocks else "read")


def print_summary(s: dict, title: str) -> None:
    print(f"==== {title} " + "=" * max(0, 60 - len(title)))
    print(f"completed {s['completed']}  failed {s['failed']}  in {s['duration_s']:.2f} s")
    for e in s["errors"]:
        print(f"  error: {e}")
    print(f"request throughput {s['request_throughput']:.2f} req/s   output {s['output_throughput']:.1f} tok/s   "
          f"total {s['total_token_throughput']:.1f} tok/s")
    clock = s.get("arrival_clock", "read")
    keys = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms") + (("ttft_read_ms", "itl_read_ms") if clock != "read" else ())
    for k in keys:
        v = s[k]
        print(f"{k[:-3].upper().replace('_READ', ' (read)'):>11} ms  mean {v['mean']:9.2f}  median {v['median']:9.2f}  "
              f"p90 {v['p90']:9.2f}  p99 {v['p99']:9.2f}")
    print(f"times by {'the arrival of each read (kernel stamps)' if clock == 'kernel' else clock + ' time'}; "
          f"{s.get('shared_read_pct', 0):.2f} % of events shared a read with a later one")


# ---- where the CPU goes: each process's CPU seconds during the load (Linux /proc) ------------------
def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads, exited ones too) so far; None if it is gone or not
    Linux. Read from the process's CPU-time clock (nanoseconds): /proc's tick counts charge whoever runs when the
    10 ms tick fires, so a process that works in short bursts between ticks (the API at a light load) reads 0."""
    try:
        return time.clock_gettime(_process_cpu_clock(pid))
    except (OSError, ValueError):
        pass  # no such clock here: the tick counts below
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces: split after it
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def _process_cpu_clock(pid: int) -> int:
    """The clock id of another process's CPU time (POSIX clock_getcpuclockid, which Python's time module lacks)."""
    import ctypes
    clock = ctypes.c_int()
    if err := ctypes.CDLL(None).clock_getcpuclockid(pid, ctypes.byref(clock)):
        raise OSError(err, os.strerror(err))
    return clock.value


def preemptions(pid: int) -> int | None:
    """How often the process's main thread (a scheduler's loop, the API's event loop) was taken off its core while it
    still wanted to run (Linux's nonvoluntary context switches); None if it is gone or not Linux."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("nonvoluntary_ctxt_switches"))
    except (OSError, StopIteration):
        return None


def server_pids(base_url: str) -> dict[str, int]:
    """The server's processes by name, from /health (ours lists its workers and its own pid; others: {})."""
    import httpx
    try:
        h = httpx.get(base_url + "/health", timeout=10).json()
    except Exception:
        return {}
    pids = {k: v for k, v in (h.get("workers") or {}).items() if isinstance(v, int)}
    return pids | ({"api": h["pid"]} if isinstance(h.get("pid"), int) else {})


def cpu_report(pids: dict[str, int], before: dict[str, float], seconds: float, tokens: int,
               preempted: dict[str, int] | None = None) -> dict:
    """{process: cpu_s, cpu_pct (of one core), us_per_token, and with `preempted` (each main thread's count before the
    load) preempted_per_s}: serve throughput <= 1 / the largest us_per_token when each process has a core of its own."""
    out = {}
    for name, pid in pids.items():
        now = cpu_seconds(pid)
        if now is not None and name in before:
            cpu = now - before[name]
            out[name] = {"cpu_s": cpu, "cpu_pct": 100 * cpu / max(seconds, 1e-9),
                         "us_per_token": 1e6 * cpu / max(tokens, 1)}
            if preempted and name in preempted and (n := preemptions(pid)) is not None:
                out[name]["preempted_per_s"] = (n - preempted[name]) / max(seconds, 1e-9)
    return out


def print_cpu(report: dict) -> None:
    if report:
        print("CPU per output token: " + "; ".join(f"{k} {v['us_per_token']:.1f} us ({v['cpu_pct']:.0f}%)"
                                                   for k, v in sorted(report.items())), flush=True)


def bench_serve(args) -> dict:
    reqs = make_requests(args)
    if args.warmup:
        warm = random_requests(args.warmup, args.seed + 10_000, (16, 32), (4, 8), args.vocab)
        asyncio.run(run_load(args.base_url, warm, progress=False, api_key=args.api_key, model=args.model,
                             http_client=args.http_client))
    pids = server_pids(args.base_url) | {"client": os.getpid()}  # this process: is the client the bottleneck?
    if "api" not in pids and getattr(args, "server_pid", None):  # a server whose /health does not say (an older one)
        pids["api"] = args.server_pid
    before = {k: c for k, p in pids.items() if (c := cpu_seconds(p)) is not None}
    preempted = {k: n for k, p in pids.items() if (n := preemptions(p)) is not None}
    load = (args.base_url, reqs)
    kw = dict(request_rate=args.request_rate, max_concurrency=args.max_concurrency, model=args.model, seed=args.seed,
              progress=not args.no_progress, api_key=args.api_key, http_client=args.http_client,
              arrival_clock=getattr(args, "arrival_clock", "kernel"),
              scrape_interval=getattr(args, "scrape_interval", None))
    procs = getattr(args, "client_procs", 1)
    if procs > 1:
        results, duration, client_cpu = run_load_sharded(*load, procs, **kw)
    else:
        results, duration = asyncio.run(run_load(*load, **kw))
    s = summarize(results, duration)
    s["cpu"] = cpu_report(pids, before, duration, s["total_output_tokens"], preempted)
    if procs > 1:  # the client processes' own CPU time (each reads its own clock), the parent's beside it
        s["cpu"]["client_procs"] = {"cpu_s": client_cpu, "cpu_pct": 100 * client_cpu / max(duration, 1e-9),
                                    "us_per_token": 1e6 * client_cpu / max(s["total_output_tokens"], 1)}
    s.update(config={k: v for k, v in vars(args).items() if k != "api_key"})
    s["config"]["request_rate"] = str(args.request_rate)
    return s


# ---- the offline engine on the same workload -----------------------------------------------------
def bench_offline(args) -> dict:
    """LLM.generate on the same requests, all at once (what `serve` is compared with)."""
    import torch

    from . import LLM, SamplingParams
    reqs = make_requests(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    kw = json.loads(args.llm_kwargs) if args.llm_kwargs else {}
    llm = LLM(args.model_path, device=args.device, dummy_weights=args.dummy_weights, **kw)
    if args.warmup:
        warm = random_requests(args.warmup, args.seed + 10_000, (16, 32), (4, 8), args.vocab)
        llm.generate([r.prompt for r in warm], [SamplingParams(0.0, max_tokens=r.output_len, ignore_eos=True)
                                                for r in warm], use_tqdm=False)
    params = [SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True) for r in reqs]
    sync = torch.cuda.synchronize if llm.engine is not None and llm.engine.device.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    outs = llm.generate([r.prompt for r in reqs], params, use_tqdm=not args.no_progress)
    sync()
    duration = time.perf_counter() - t
    out_tokens = sum(len(o["token_ids"]) for o in outs)
    in_tokens = sum(o["prompt_tokens"] for o in outs)
    llm.close()
    return {"completed": len(outs), "duration_s": duration, "total_input_tokens": in_tokens,
            "total_output_tokens": out_tokens, "request_throughput": len(outs) / duration,
            "output_throughput": out_tokens / duration, "total_token_throughput": (in_tokens + out_tokens) / duration,
            "torch_threads": torch.get_num_threads()}


# ---- side by side: the offline engine, then the server, on the same workload ---------------------
def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_path: str, device: str | None, dummy: bool, serve_args: list[str], log_path: str,
                 timeout: float = 900.0, pythonpath: str | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m minisgl_edu.serve` on a free 127.0.0.1 port; returns (process, base URL) once /health is 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "minisgl_edu.serve", "--model", model_path, "--port", str(port), *serve_args]
    cmd += (["--device", device] if device else []) + (["--dummy-weights"] if dummy else [])
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    log = open(log_path, "ab")
    # another checkout: a before/after run; first on the path, before whatever else PYTHONPATH names (the GPU's wheels)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (pythonpath, os.environ.get("PYTHONPATH"))))) \
        if pythonpath else None
    # `python -m` puts the working directory first on sys.path: run from that checkout, or it serves this one
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            cwd=pythonpath)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout, where=f" (log: {log_path})")
    except RuntimeError:
        stop_server(proc)  # a no-op once it has exited
        raise
    return proc, url


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 300.0, poll: float = 0.5, where: str = "") -> None:
    """Block until `url`/health answers 200; RuntimeError if `proc` exits first or `timeout` s pass (`where` ends
    the message: the log's path)."""
    import httpx
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} while starting{where}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server was not healthy after {timeout:.0f} s{where}")
        time.sleep(poll)


def stop_server(proc: subprocess.Popen) -> None:
    import signal
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the launcher stops its workers in order
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def offline_subprocess(args, seed: int, threads: int | None = None) -> dict:
    """`bench offline` in a fresh interpreter (its own threads and device memory), same workload flags."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "offline.json")
        cmd = [sys.executable, "-m", "minisgl_edu.bench", "offline", *workload_argv(args, seed), "--out", out,
               "--no-progress", "--model-path", args.model_path]
        cmd += (["--device", args.device] if args.device else []) + (["--dummy-weights"] if args.dummy_weights else [])
        cmd += ["--llm-kwargs", args.llm_kwargs] if args.llm_kwargs else []
        cmd += ["--threads", str(threads or args.threads)] if threads or args.threads else []
        subprocess.run(cmd, check=True)
        with open(out) as f:
            return json.load(f)


STEP_METRIC = "minisgl:step_time_seconds"
ITL_METRIC = "minisgl:inter_token_latency_seconds"  # observed by the API process as each reply arrives
EMIT_METRIC = "minisgl:emit_interval_seconds"  # observed by the scheduler as it hands each step's tokens out
HOP_METRIC = "minisgl:reply_hop_seconds"  # a step's replies, hop by hop from the scheduler to the API process


def histogram_totals(url: str, names: dict[str, str]) -> dict[str, dict]:
    """{histogram name: {label value: (sum, count, [(upper bound, cumulative count), ...])}} so far, from one GET
    of the server's /metrics; `names` maps each histogram to the label it is split by ("": none). A histogram the
    server does not export (another server, or none yet) is {}."""
    import httpx
    out = {n: {} for n in names}
    try:
        r = httpx.get(url + "/metrics", timeout=10)
        from prometheus_client.parser import text_string_to_metric_families
        for fam in text_string_to_metric_families(r.text if r.status_code == 200 else ""):
            if fam.name not in names:
                continue
            sums, counts, buckets = {}, {}, {}
            for s in fam.samples:
                key = s.labels.get(names[fam.name], "")
                if s.name.endswith("_sum"):
                    sums[key] = s.value
                elif s.name.endswith("_count"):
                    counts[key] = s.value
                elif s.name.endswith("_bucket"):
                    buckets.setdefault(key, []).append((float(s.labels["le"]), s.value))
            out[fam.name] = {k: (sums[k], counts[k], sorted(buckets.get(k, []))) for k in sums if k in counts}
    except Exception:  # another server, or one without /metrics
        return {n: {} for n in names}
    return out


def run_buckets(before: dict, after: dict, key: str) -> list[tuple[float, float]]:
    """One label's cumulative buckets counted during a run: histogram_totals' `after` minus `before` ({} or no such
    label before: nothing yet)."""
    was = dict(before.get(key, (0, 0, []))[2])
    return [(le, c - was.get(le, 0)) for le, c in after[key][2]]


def histogram_quantile(buckets: list[tuple[float, float]], q: float = 0.5) -> float | None:
    """The q-quantile of a Prometheus histogram, given as sorted (upper bound, cumulative count) pairs, by linear
    interpolation inside the bucket that holds it (PromQL's histogram_quantile); None when it is empty or lies
    in the +Inf bucket."""
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    rank, lo, below = q * total, 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank and cum > below:
            return None if le == float("inf") else lo + (le - lo) * (rank - below) / (cum - below)
        lo, below = le, cum
    return None


def merge_buckets(phases: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """One histogram of every phase's steps: the cumulative counts added bound by bound (the phases share
    STEP_BUCKETS, so their bounds are the same)."""
    total: dict[float, float] = {}
    for b in phases:
        for le, cum in b:
            total[le] = total.get(le, 0) + cum
    return sorted(total.items())


def bench_serve_timed(a, url: str) -> dict:
    """bench_serve, plus the server's step time by phase during this run (ms, from /metrics): the mean (step_ms)
    and the median (step_median_ms, from the histogram's buckets); the p99 of all steps together (step_p99_ms);
    and the p99 of the server's own ITL, timed where the scheduler hands the tokens out (emit_p99_ms) and where the
    API process receives the replies (api_itl_p99_ms). Beside the client's ITL p99 they say where a slow token was
    slowed: the step, the loop around it, the way to the API process, or after it. hop_ms: each hop of that way
    (scheduler -> detokenizer, the detokenizer, detokenizer -> API), a step's latency there, median and p99."""
    names = {STEP_METRIC: "phase", ITL_METRIC: "", EMIT_METRIC: "", HOP_METRIC: "hop"}
    h0 = histogram_totals(url, names)
    s = bench_serve(a)
    s.pop("config")
    h1 = histogram_totals(url, names)
    (before, after), (itl0, itl1), (emit0, emit1), (hop0, hop1) = ((h0[n], h1[n]) for n in names)
    s["step_ms"], s["step_median_ms"], deltas = {}, {}, []
    for p, (t, n, _) in after.items():
        t0, n0, _ = before.get(p, (0, 0, []))
        if n > n0:
            s["step_ms"][p] = 1e3 * (t - t0) / (n - n0)
            deltas.append(run_buckets(before, after, p))
            med = histogram_quantile(deltas[-1])
            if med is not None:
                s["step_median_ms"][p] = 1e3 * med
    if deltas and (p99 := histogram_quantile(merge_buckets(deltas), 0.99)) is not None:
        s["step_p99_ms"] = 1e3 * p99
    # the server's ITL where the API process receives each reply (before its writes), and where the scheduler
    # hands the tokens out (before the detokenizer): with the client's, three points on a token's way
    for key, t0, t1 in (("api_itl_p99_ms", itl0, itl1), ("emit_p99_ms", emit0, emit1)):
        if "" in t1 and (p99 := histogram_quantile(run_buckets(t0, t1, ""), 0.99)) is not None:
            s[key] = 1e3 * p99
    for hop in hop1:
        qs = [histogram_quantile(run_buckets(hop0, hop1, hop), q) for q in (0.5, 0.99)]
        if None not in qs:
            s.setdefault("hop_ms", {})[hop] = {"median": 1e3 * qs[0], "p99": 1e3 * qs[1]}
    return s


def parse_rates(spec: str, peak: float) -> list[float]:
    """'4,8,inf' or '0.25x,0.5x' (fractions of the all-at-once request throughput) -> request rates."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        out.append(float(part[:-1]) * peak if part.endswith("x") else float(part))
    return out


def bench_compare(args) -> dict:
    """Offline LLM.generate and the server on the same workload, `repeats` times (a fresh seed each time, so
    no repeat hits the prefix cache; the order rotates), optionally also a second server from another
    checkout (`--baseline-pythonpath`: before/after) and the server under a 1 Hz /metrics scrape; then an
    optional request-rate sweep."""
    import tempfile
    log_dir = os.path.dirname(os.path.abspath(args.server_log)) if args.server_log else tempfile.mkdtemp(prefix="bench-")
    serve_args = args.serve_args.split() if args.serve_args else []
    keep = (args.device or "cpu") == "cpu"  # on a GPU the server's KV pool would take the offline engine's memory
    servers: dict[str, tuple[subprocess.Popen, str]] = {}

    def server(name: str) -> str:
        if name not in servers:
            path = args.baseline_pythonpath if name == "baseline" else None
            log = args.server_log if name == "serve" and args.server_log else os.path.join(log_dir, f"{name}.log")
            servers[name] = start_server(args.model_path, args.device, args.dummy_weights, serve_args, log,
                                         pythonpath=path)
        return servers[name][1]

    def stop_all() -> None:
        for proc, _ in servers.values():
            stop_server(proc)
        servers.clear()
    extra_offline = f"offline_{args.also_offline_threads}t" if args.also_offline_threads else None
    variants = ["offline", "serve"] + (["baseline"] if args.baseline_pythonpath else []) + \
        (["serve_scraped"] if args.scrape_check else []) + ([extra_offline] if extra_offline else [])
    runs = []
    try:
        for rep in range(args.repeats):
            seed = args.seed + rep
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            row = {"seed": seed, "order": order}
            for which in order:
                if which.startswith("offline"):
                    if not keep:
                        stop_all()
                    row[which] = offline_subprocess(args, seed, args.also_offline_threads if which != "offline"
                                                    else None)
                    continue
                url = server("baseline" if which == "baseline" else "serve")
                a = with_url(args, url, seed)
                a.server_pid = servers["baseline" if which == "baseline" else "serve"][0].pid
                a.scrape_interval = 1.0 if which == "serve_scraped" else None
                row[which] = bench_serve_timed(a, url)
            runs.append(report_repeat(rep, row, variants, extra_offline))
            save_partial(args, {"runs": runs, "sweep": []})
        sweep = run_sweep(args, server("serve"), runs) if args.sweep_rates else []
    finally:
        stop_all()
    return {"runs": runs, "sweep": sweep, "server_logs": log_dir, **ratio_spread(runs),
            "config": {k: v for k, v in vars(args).items() if k != "api_key"} | {"request_rate": "inf"}}


def report_repeat(rep: int, row: dict, variants: list[str], extra_offline: str | None) -> dict:
    """One repeat of bench_compare: every variant's throughput as a ratio to offline, printed with the CPU reports."""
    off = row["offline"]["output_throughput"]
    row["ratio"] = {k: row[k]["output_throughput"] / off for k in variants if k != "offline"}
    if extra_offline:  # the server against an offline engine with the scheduler's thread count
        row["ratio"][f"serve_vs_{extra_offline}"] = row["serve"]["output_throughput"] / \
            row[extra_offline]["output_throughput"]
    print(f"repeat {rep}: offline {off:.1f} tok/s; " + "; ".join(
        f"{k} {row[k]['output_throughput']:.1f} tok/s (x{row['ratio'][k]:.3f}, failed {row[k].get('failed', 0)})"
        for k in row["ratio"] if k in row) + "".join(
        f"; {k} x{v:.3f}" for k, v in row["ratio"].items() if k not in row), flush=True)
    for k in row["order"]:
        if "cpu" in row[k]:
            print(f"  {k}: ", end="")
            print_cpu(row[k]["cpu"])
    return row


def ratio_spread(runs: list[dict]) -> dict:
    """{ratio_<variant>: median, min, max over the repeats}."""
    out = {}
    for k in runs[0]["ratio"]:
        ratios = [r["ratio"][k] for r in runs]
        out[f"ratio_{k}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return out


def run_sweep(args, url: str, runs: list[dict]) -> list[dict]:
    """The workload at each request rate (a fresh seed per rate): throughput, TTFT and ITL against the rate."""
    peak = statistics.median(r["serve"]["request_throughput"] for r in runs)
    sweep = []
    for i, rate in enumerate(parse_rates(args.sweep_rates, peak)):
        a = with_url(args, url, args.seed + 1000 + i)
        a.request_rate, a.num_prompts = rate, args.sweep_num_prompts or args.num_prompts
        s = bench_serve_timed(a, url)
        s["request_rate"] = rate
        print(f"rate {rate:.2f} req/s: {s['output_throughput']:.1f} tok/s, TTFT p50/p99 "
              f"{s['ttft_ms']['median']:.1f}/{s['ttft_ms']['p99']:.1f} ms, ITL p50/p99 "
              f"{s['itl_ms']['median']:.1f}/{s['itl_ms']['p99']:.1f} ms, failed {s['failed']}", flush=True)
        sweep.append(s)
        save_partial(args, {"runs": runs, "sweep": sweep})
    return sweep


def save_partial(args, out: dict) -> None:
    """Write what is measured so far to --out (a run cut short by a time limit keeps its finished parts)."""
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({**out, "partial": True}, f, indent=1, default=str)


def with_url(args, url: str, seed: int):
    import argparse
    a = argparse.Namespace(**vars(args))
    a.base_url, a.seed, a.model, a.api_key = url, seed, None, None
    a.request_rate, a.max_concurrency, a.scrape_interval = math.inf, args.max_concurrency, None
    return a


# ---- the command line ----------------------------------------------------------------------------
WORKLOAD_FLAGS = ("dataset", "num_prompts", "input_len", "output_len", "vocab", "groups", "system_len",
                  "prompt_mode", "tokenizer", "warmup")


def workload_argv(args, seed: int) -> list[str]:
    """The workload flags of `args` as a command line (for the offline subprocess), with this seed."""
    out = ["--seed", str(seed)]
    for k in WORKLOAD_FLAGS:
        v = getattr(args, k)
        if v is None:
            continue
        flag = "--" + k.replace("_", "-")
        out += [flag, *map(str, v)] if isinstance(v, (list, tuple)) else [flag, str(v)]
    return out


def add_workload_flags(p) -> None:
    p.add_argument("--dataset", choices=["random", "shared-prefix", "sharegpt"], default="random")
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--input-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=None,
                   help="prompt tokens, uniform in [MIN, MAX] (default 100 1024; shared-prefix: the question)")
    p.add_argument("--output-len", type=int, nargs=2, metavar=("MIN", "MAX"), default=None,
                   help="output tokens, uniform in [MIN, MAX] (default 100 1024)")
    p.add_argument("--vocab", type=int, default=10000, help="prompt ids are drawn from [0, VOCAB]")
    p.add_argument("--groups", type=int, default=4, help="shared-prefix: how many system prompts")
    p.add_argument("--system-len", type=int, default=512, help="shared-prefix: tokens per system prompt")
    p.add_argument("--prompt-mode", choices=["ids", "text"], default="ids")
    p.add_argument("--tokenizer", default=None, help="text mode: decode the ids with this tokenizer")
    p.add_argument("--warmup", type=int, default=4, help="short requests sent first, not measured")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default=None, help="write the results as JSON here")


def parse_args(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m minisgl_edu.bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="load-test an OpenAI-compatible server")
    s.add_argument("--base-url", default="http://127.0.0.1:1919")
    s.add_argument("--model", default=None, help="the model name to send (default: the first of /v1/models)")
    s.add_argument("--api-key", default=os.environ.get("MINISGL_API_KEY"))
    s.add_argument("--scrape-interval", type=float, default=None, help="GET /metrics this often during the load")
    o = sub.add_parser("offline", help="LLM.generate on the same workload")
    c = sub.add_parser("compare", help="offline and serve side by side, then an optional rate sweep")
    for p in (s, c):
        p.add_argument("--request-rate", type=float, default=math.inf, help="Poisson arrivals per second (inf: all "
                                                                            "at once)")
        p.add_argument("--max-concurrency", type=int, default=None)
        p.add_argument("--http-client", choices=["raw", "httpx"], default="raw",
                       help="raw: our minimal HTTP/1.1 client (http:// only; ~10x less CPU per event); httpx: the twin")
        p.add_argument("--arrival-clock", choices=["kernel", "read"], default="kernel",
                       help="kernel: time each read by when its bytes arrived (the kernel's receive stamp, Linux; the "
                            "raw client); read: by when the client's loop got to it (the twin, reported beside it)")
        p.add_argument("--client-procs", type=int, default=1,
                       help="client processes sharing the load (one event loop each): a loop that reads a burst of "
                            "streams one by one stamps the last ones late, which a single loop adds to the ITL tail")
    for p in (o, c):
        p.add_argument("--model-path", default=None, help="model folder (default: the default model)")
        p.add_argument("--device", default=None)
        p.add_argument("--dummy-weights", action="store_true")
        p.add_argument("--llm-kwargs", default=None, help='offline LLM(...) keywords as JSON, e.g. {"page_size": 16}')
        p.add_argument("--threads", type=int, default=None, help="offline: torch threads (default: torch's)")
    c.add_argument("--serve-args", default=None, help="extra `serve` flags, e.g. '--skip-tokenizer-init'")
    c.add_argument("--repeats", type=int, default=1)
    c.add_argument("--sweep-rates", default=None, help="e.g. '0.25x,0.5x,1x' (of the peak) or '4,8,16'")
    c.add_argument("--sweep-num-prompts", type=int, default=None)
    c.add_argument("--server-log", default=None)
    c.add_argument("--baseline-pythonpath", default=None,
                   help="also serve from this checkout (PYTHONPATH) and bench it in the same rotation: before/after")
    c.add_argument("--also-offline-threads", type=int, default=None,
                   help="also run offline with this many torch threads (e.g. the server scheduler's: cores - 1)")
    c.add_argument("--scrape-check", action="store_true", help="also bench the server while /metrics is scraped at "
                                                               "1 Hz (its cost)")
    for p in (s, o, c):
        add_workload_flags(p)
    args = ap.parse_args(argv)
    if getattr(args, "client_procs", 1) < 1:
        ap.error(f"--client-procs must be at least 1, got {args.client_procs}")
    if args.cmd != "offline" and args.max_concurrency is not None and args.max_concurrency < args.client_procs:
        ap.error(f"--max-concurrency {args.max_concurrency} is below --client-procs {args.client_procs}")
    if args.cmd != "serve" and args.model_path is None:
        from .default_model import default_model_path
        args.model_path = default_model_path()
    return args


def main(argv=None) -> int:
    import signal
    # `timeout` sends SIGTERM: unwind, stop our servers; the caller's handler is back on return (pytest's, say)
    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return run_command(parse_args(argv))
    finally:
        signal.signal(signal.SIGTERM, old)


def run_command(args) -> int:
    if args.cmd == "serve":
        out = bench_serve(args)
        print_summary(out, f"serve {args.base_url}")
        print_cpu(out["cpu"])
    elif args.cmd == "offline":
        out = bench_offline(args)
        print(f"offline: {out['completed']} requests, {out['output_throughput']:.1f} output tok/s")
    else:
        out = bench_compare(args)
        for k, v in out.items():
            if k.startswith("ratio_"):
                print(f"{k[6:]} / offline output throughput: median {v['median']:.3f} (min {v['min']:.3f}, "
                      f"max {v['max']:.3f})")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 1 if out.get("failed") else 0


# ---- the load curve (notebook 09) ----------------------------------------------------------------
def plot_load_curve(results: dict | str, axes=None):
    """Throughput, TTFT and ITL (p50 and p99) against the request rate, one line per model, from
    scripts/gpu_serve.sh's gpu_serve.json (or one `bench compare` JSON); returns the matplotlib axes."""
    import matplotlib.pyplot as plt
    if isinstance(results, str):
        with open(results) as f:
            results = json.load(f)
    models = results.get("models") or {"": results}
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for name, res in models.items():
        sweep = sorted(res["sweep"], key=lambda s: s["request_rate"])
        rates = [s["request_rate"] for s in sweep]
        offline = res["runs"][0]["offline"]["output_throughput"]
        line, = axes[0].plot(rates, [s["output_throughput"] for s in sweep], "o-", label=f"{name} serve")
        axes[0].axhline(offline, ls=":", color=line.get_color(), label=f"{name} offline")
        for ax, key in ((axes[1], "ttft_ms"), (axes[2], "itl_ms")):
            ax.plot(rates, [s[key]["median"] for s in sweep], "o-", color=line.get_color(), label=f"{name} p50")
            ax.plot(rates, [s[key]["p99"] for s in sweep], "s--", color=line.get_color(), label=f"{name} p99")
    for ax, title in zip(axes, ("output tokens/s", "TTFT (ms)", "ITL (ms)")):
        ax.set_xlabel("request rate (req/s)")
        ax.set_title(title)
        ax.legend(fontsize=7)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    return axes
