#!/usr/bin/python3
"""The raw Python socket rates the Python provider is compared with, over
a Unix socketpair between this process and a child process it forks:

  rawsock.py [media] [n]  the child writes n 1 MiB blocks with sendall (default
                          4096, 4 GiB); this process reads them with recv_into
                          into one buffer. Prints MB/s.
  rawsock.py small [n]    the child writes n 64-byte messages, one sendall (one
                          write syscall) each (default 1,000,000); this process
                          reads them in bulk, recv_into a 64 KiB buffer,
                          counting bytes. Prints ns per message and messages/s:
                          the shape of internal/coalesce's raw64 baseline.

Timed from just before the fork to the last byte read."""
import os
import socket
import sys
import time

args = sys.argv[1:]
mode = "media"
if args and args[0] in ("media", "small"):
    mode = args.pop(0)
if mode == "media":
    n, size, rbuf = 4096, 1 << 20, 1 << 20
else:
    n, size, rbuf = 1_000_000, 64, 64 << 10
if len(args) > 1 or (args and not args[0].isdigit()) or (args and int(args[0]) < 1):
    sys.exit("usage: rawsock.py [media|small] [n >= 1]")
if args:
    n = int(args[0])

a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
buf = bytearray(rbuf)
mv = memoryview(buf)
want = n * size
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    a.close()
    msg = memoryview(bytes(size)) if mode == "media" else bytes(size)
    send = b.sendall
    for _ in range(n):
        send(msg)
    os._exit(0)
b.close()
total = 0
while total < want:
    r = a.recv_into(mv)
    if r == 0:
        break
    total += r
el = time.perf_counter() - t0
os.waitpid(pid, 0)
if total != want:
    sys.exit(f"rawsock.py: read {total} of {want} bytes")
if mode == "media":
    print(f"raw python socket: {total / el / 1e6:.0f} MB/s ({total} bytes in {el:.3f} s)")
else:
    print(f"raw python socket small: {el / n * 1e9:.0f} ns/message ({n / el:.0f} messages/s, {n} messages of {size} bytes in {el:.3f} s)")
