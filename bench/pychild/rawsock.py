#!/usr/bin/python3
"""The raw Python socket rate the Python provider's media is compared
with: a child process writes 1 MiB blocks with sendall on one end of a
Unix socketpair, this process reads them with recv_into into one buffer.
Prints MB/s over n blocks (default 4096, 4 GiB)."""
import os
import socket
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
size = 1 << 20
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
pid = os.fork()
if pid == 0:
    a.close()
    buf = memoryview(bytes(size))
    for _ in range(n):
        b.sendall(buf)
    os._exit(0)
b.close()
buf = bytearray(size)
mv = memoryview(buf)
t0 = time.perf_counter()
total = 0
while total < n * size:
    r = a.recv_into(mv)
    if r == 0:
        break
    total += r
el = time.perf_counter() - t0
os.waitpid(pid, 0)
print(f"raw python socket: {total / el / 1e6:.0f} MB/s ({total} bytes in {el:.3f} s)")
