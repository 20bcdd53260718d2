"""Chapter 9 — talking to the workers without HTTP: a synchronous client and the `--shell` chat.

`Client` is the API server's job done by hand: take a uid, send a TokenizeMsg to tokenizer
`Addresses.tokenizer_of(uid)`, read UserReplies for that uid from the frontend address. The
interactive shell and notebook 01 use it; the HTTP server does the same with asyncio (`api.Frontend`).
"""
from __future__ import annotations

import itertools
import time
from typing import Iterator

from ..messages import AbortMsg, SchedulerStats, StatsMsg, StatsReply, TokenizeMsg, UserReply, unbatch_rows
from ..req import SamplingParams
from .common import ServerConfig, trace
from .launcher import Workers
from .queues import pull, push


class Client:
    def __init__(self, workers: Workers, cfg: ServerConfig | None = None):
        self.workers, self.cfg = workers, cfg
        addrs = workers.addrs
        self.to_tokenizers = [push(addrs.tokenizer(i)) for i in range(addrs.num_tokenizers)]
        self.inbox = pull(addrs.frontend)
        self.uids = itertools.count()
        self.early: list = []  # replies for other uids that arrived while we waited

    def send(self, msg) -> None:
        if self.cfg is not None and isinstance(msg, TokenizeMsg):
            trace(self.cfg, "api", "send TokenizeMsg", [msg.uid])
        self.to_tokenizers[self.workers.addrs.tokenizer_of(msg.uid)].put(msg)

    def _next(self, uid: int, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while True:
            for i, m in enumerate(self.early):
                if m.uid == uid:
                    return self.early.pop(i)
            msg = self.inbox.get(timeout_ms=200)
            if msg is not None:
                self.early.extend(m for m in unbatch_rows(msg) if not isinstance(m, SchedulerStats))  # /metrics' alone
                continue
            dead = self.workers.dead()
            if dead is not None:
                raise RuntimeError(f"{dead.name} exited with code {dead.exitcode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply for request {uid} within {timeout_s} s")

    def generate(self, prompt: str | list[dict], params: SamplingParams | None = None,
                 timeout_s: float = 120.0) -> Iterator[UserReply]:
        """Yield the UserReplies of one request (text or chat messages) until it finishes."""
        uid = next(self.uids)
        text, messages = (prompt, None) if isinstance(prompt, str) else (None, prompt)
        self.send(TokenizeMsg(uid, text, messages, params or SamplingParams()))
        finished = False
        try:
            while not finished:
                reply = self._next(uid, timeout_s)
                if self.cfg is not None:
                    trace(self.cfg, "api", "recv UserReply", [uid])
                finished = reply.finished
                yield reply
        finally:
            if not finished:  # the caller stopped early (Ctrl-C): free the request's pages
                self.send(AbortMsg(uid))

    def stats(self, timeout_s: float = 30.0) -> StatsReply:
        uid = next(self.uids)
        self.send(StatsMsg(uid))
        return self._next(uid, timeout_s)

    def close(self) -> None:
        for q in self.to_tokenizers + [self.inbox]:
            q.close()


def run_shell(cfg: ServerConfig, workers: Workers, max_tokens: int = 256) -> None:
    """An interactive chat in the terminal: /reset forgets the conversation, /exit (or Ctrl-D) leaves."""
    client = Client(workers)
    history: list[dict] = []
    print(f"minisgl-edu shell — {cfg.served_name}. /reset clears the conversation, /exit leaves.")
    try:
        while True:
            try:
                line = input("\n>>> ").strip()
            except EOFError:
                break
            if line in ("/exit", "/quit"):
                break
            if line == "/reset":
                history.clear()
                print("(conversation cleared)")
                continue
            if not line:
                continue
            history.append({"role": "user", "content": line})
            answer = []
            try:
                for reply in client.generate(history, SamplingParams(max_tokens=max_tokens)):
                    if reply.error:
                        print(f"[error] {reply.error}")
                        history.pop()
                        break
                    answer.append(reply.incremental_output)
                    print(reply.incremental_output, end="", flush=True)
                else:
                    history.append({"role": "assistant", "content": "".join(answer)})
                    print()
            except KeyboardInterrupt:  # stop this answer, keep the shell
                history.pop()
                print("\n(interrupted)")
    finally:
        client.close()
