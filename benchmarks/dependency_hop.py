"""Issue 18: what a plain-`def` FastAPI dependency costs a request, beside the `async def` one (chapter 9).

FastAPI awaits an `async def` dependency on the event loop and runs a plain `def` one on a worker thread of anyio's
pool. The API's key check was a plain `def` until 2026-12-04 (it guards every /v1 request). Here the real app
(`create_app`, no workers behind it) gets two routes that differ only in that, driven in-process through httpx's
ASGI transport: once with the loop idle, once with the loop busy as a served load keeps it (back-to-back 0.5 ms
callbacks holding the GIL, as the API's reply writing does). Prints the median latency of a GET per round.

    python benchmarks/dependency_hop.py [--rounds 3] [--requests 30]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import types

import httpx
from fastapi import Depends, Request

from minisgl_edu.config import ServerConfig
from minisgl_edu.default_model import default_model_path
from minisgl_edu.server import api


def plain_check_key(request: Request) -> None:  # the old check: a plain def, so a worker thread runs it
    return None


async def busy(stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0005:
            pass
        await asyncio.sleep(0)


async def main(rounds: int, requests: int) -> None:
    app = api.create_app(ServerConfig(model_path=str(default_model_path())), types.SimpleNamespace(dead=None, pids=[]))
    app.add_api_route("/v1/plain", api.health, methods=["GET"], dependencies=[Depends(plain_check_key)])
    app.add_api_route("/v1/async", api.health, methods=["GET"], dependencies=[Depends(api.check_key)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        for busy_loop in (False, True):
            stop = asyncio.Event()
            task = asyncio.create_task(busy(stop)) if busy_loop else None
            res: dict[str, list[float]] = {"/v1/plain": [], "/v1/async": []}
            for _ in range(rounds):
                for path in res:
                    lat = []
                    for _ in range(requests):
                        t = time.perf_counter()
                        r = await c.get(path)
                        lat.append(time.perf_counter() - t)
                        assert r.status_code == 200, r.text
                    res[path].append(statistics.median(lat) * 1e3)
            stop.set()
            if task is not None:
                await task
            for path, v in res.items():
                kind = "plain def (worker thread)" if path == "/v1/plain" else "async def (event loop)"
                print(f"{'busy' if busy_loop else 'idle'} loop, {kind:<26}: median ms per request, by round "
                      f"{[round(x, 2) for x in v]}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30)
    a = ap.parse_args()
    asyncio.run(main(a.rounds, a.requests))
