"""Session 23: one-way latency of a ZMQ ipc PUSH/PULL hop against a bare UNIX SOCK_SEQPACKET, by ping-pong / 2,
with the peer sleeping 1.5 ms between messages (as the detokenizer does between steps). 600-byte messages."""
import os, socket, statistics, sys, tempfile, time, multiprocessing as mp
import zmq
N = 3000
def zmq_echo(a, b):
    ctx = zmq.Context(); i = ctx.socket(zmq.PULL); i.bind(a); o = ctx.socket(zmq.PUSH); o.connect(b)
    for _ in range(N): o.send(i.recv())
def unix_echo(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(path); s.listen(1); c, _ = s.accept()
    for _ in range(N): c.send(c.recv(65536))
d = tempfile.mkdtemp()
a, b = f"ipc://{d}/a", f"ipc://{d}/b"
p = mp.Process(target=zmq_echo, args=(a, b)); p.start()
ctx = zmq.Context(); o = ctx.socket(zmq.PUSH); o.connect(a); i = ctx.socket(zmq.PULL); i.bind(b)
time.sleep(0.5); rt = []
for k in range(N):
    t = time.perf_counter(); o.send(b"x" * 600); i.recv(); rt.append(time.perf_counter() - t)
    time.sleep(0.0015)  # a step apart: the peer sleeps between messages, as the detokenizer does
p.join()
rt = sorted(rt[100:]); print(f"zmq ipc  one-way ~ median {rt[len(rt)//2]/2*1e6:.0f} us, p99 {rt[int(len(rt)*.99)]/2*1e6:.0f} us")
path = f"{d}/u"; p = mp.Process(target=unix_echo, args=(path,)); p.start(); time.sleep(0.5)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(path); rt = []
for k in range(N):
    t = time.perf_counter(); s.send(b"x" * 600); s.recv(65536); rt.append(time.perf_counter() - t)
    time.sleep(0.0015)
p.join()
rt = sorted(rt[100:]); print(f"unix seqpacket one-way ~ median {rt[len(rt)//2]/2*1e6:.0f} us, p99 {rt[int(len(rt)*.99)]/2*1e6:.0f} us")
