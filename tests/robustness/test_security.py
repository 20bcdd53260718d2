"""Robustness — security: who can reach the server, and what can bytes on a socket make it do?

* every listening TCP socket of the server's process tree (HTTP, and gloo between tp ranks) is on
  the loopback interface, by default;
* with `--api-key`, every `/v1` route (and the debug route) answers 401 without the right Bearer key;
* the sockets between processes (ZMQ's `ipc://` ones, and the replies' plain `unix://` ones) are files in
  one directory of mode 0700 owned by the server's user, and that directory is gone after shutdown;
* the message decoder builds only the project's message classes: a crafted payload naming
  `os.system`, `subprocess.Popen`, an unknown module, or a project class that is not a message is
  refused with MessageError, and nothing is imported or called.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import httpx
import msgpack
import psutil
import pytest

from minisgl_edu.messages import AbortMsg, BatchBackendMsg, MessageError, decode, encode

KEY = "robustness-key-Zq81"


TINY_CONTEXT = 256  # the conftest's tiny_dir: a context this short is enough here


@pytest.fixture(scope="module")
def server(make_server, tiny_dir):
    """tp=2 so that the rank-to-rank (gloo) sockets are checked too; no --host: the default."""
    return make_server("--model", tiny_dir, "--dummy-weights", "--tp", "2", api_key=KEY)


def test_every_listening_socket_is_loopback(server, tiny_dir):
    listening = []
    for p in server.procs():
        for c in p.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                listening.append((p.pid, c.laddr.ip, c.laddr.port))
    assert any(port == server.port for _, _, port in listening), listening  # HTTP is among them
    assert all(ip in ("127.0.0.1", "::1") for _, ip, _ in listening), f"listening beyond loopback: {listening}"
    print(f"\nlistening TCP sockets (pid, ip, port): {listening}")
    from minisgl_edu.serve import parse_args
    assert parse_args(["--model", tiny_dir])[0].host == "127.0.0.1"  # the default, without --host


def test_api_key_guards_every_v1_route(server):
    spec = httpx.get(server.url + "/openapi.json", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    routes = [(m.upper(), path) for path, ops in spec["paths"].items() for m in ops
              if path.startswith("/v1") or path.startswith("/debug")]
    assert {("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("GET", "/v1/models")} <= set(routes)
    bodies = {"/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
              "/v1/completions": {"prompt": "hi", "max_tokens": 2}}
    bad_headers = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                   {"Authorization": KEY}, {"Authorization": f"Bearer {KEY[:-1]}"},
                   {"Authorization": f"Bearer {KEY}x"}, {"X-Api-Key": KEY}]
    with httpx.Client(base_url=server.url, timeout=60) as c:
        served = c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()["data"][0]["id"]
        for method, template in routes:
            path = template.replace("{model}", served)  # /v1/models/{model}: the served model
            for h in bad_headers:
                r = c.request(method, path, json=bodies.get(path), headers=h)
                assert r.status_code == 401, (method, path, h, r.status_code)
                assert KEY not in r.text
            r = c.request(method, path, json=bodies.get(path), headers={"Authorization": f"Bearer {KEY}"})
            assert r.status_code == 200, (method, path, r.text[:300])
        health = c.get("/health")  # liveness stays public, and tells nothing secret
        assert health.status_code == 200 and KEY not in health.text


def test_ipc_sockets_live_in_a_private_directory(server):
    paths = set()
    for p in server.procs():
        for c in p.net_connections(kind="unix"):
            if c.laddr:
                paths.add(c.laddr)
    zmq_dirs = {os.path.dirname(p) for p in paths if os.path.basename(os.path.dirname(p)).startswith("minisgl-")}
    assert len(zmq_dirs) == 1, f"expected one private socket directory, got {zmq_dirs} from {paths}"
    d = zmq_dirs.pop()
    assert {"detokenizer", "frontend", "scheduler"} <= {os.path.basename(p) for p in paths if p.startswith(d)}, paths
    st = os.stat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid(), (oct(st.st_mode), st.st_uid)
    for name in os.listdir(d):
        assert os.stat(os.path.join(d, name)).st_uid == os.getuid()
    assert not [c for p in server.procs() for c in p.net_connections(kind="inet")
                if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.ip not in ("127.0.0.1", "::1")]
    server.stop()
    assert not os.path.exists(d), "the socket directory outlived the server"


# ---- the decoder: no payload builds anything but a message ----------------------------------------
CRAFTED = [
    {"__type__": "os.system", "command": "touch /tmp/minisgl-pwned"},
    {"__type__": "subprocess.Popen", "args": ["touch", "/tmp/minisgl-pwned"]},
    {"__type__": "builtins.eval", "source": "__import__('os').system('touch /tmp/minisgl-pwned')"},
    {"__type__": "minisgl_evil_module_xyz.Thing"},
    {"__type__": "__import__", "name": "minisgl_evil_module_xyz"},
    {"__type__": "Req", "uid": 1, "token_ids": [1], "sampling": None},  # a project class, not a message
    {"__type__": "Scheduler"},
    {"__type__": "AbortMsg", "uid": 1, "__class__": "os.system"},  # a field the message does not have
    {"__type__": "AbortMsg", "uid": {"__type__": "subprocess.Popen", "args": ["true"]}},  # nested
    {"__type__": "BatchBackendMsg", "data": [{"__type__": "AbortMsg", "uid": 1}, {"__type__": "os.system"}]},
    {"__type__": "Tensor", "dtype": "object", "buffer": b"\x00" * 8},  # numpy's pickled-object dtype
    {"__type__": "Tensor", "dtype": "int32", "buffer": b"\x00" * 8, "shape": [2, 1]},
]


@pytest.mark.parametrize("payload", CRAFTED, ids=lambda p: str(p["__type__"]))
def test_decoder_refuses_crafted_types_and_runs_nothing(payload, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(("os.system", a)))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: calls.append(("Popen", a)))
    modules = set(sys.modules)
    with pytest.raises(MessageError):
        decode(msgpack.packb(payload, use_bin_type=True))
    assert not calls, calls
    assert set(sys.modules) == modules, f"decoding imported {set(sys.modules) - modules}"
    assert not os.path.exists("/tmp/minisgl-pwned")


def test_decoder_still_reads_real_messages():
    """The refusals above are not a decoder that refuses everything."""
    msg = BatchBackendMsg([AbortMsg(3), AbortMsg(4)])
    assert decode(encode(msg)) == msg
