"""The child runtime as a host sees it: a real child process, fds 3 and 4,
real Unix sockets. The black-box suite is conformance/provider; these
check what is particular to the Python SDK: a handler that blocks the
event loop does not stop pongs, and control EOF ends the child in time."""

import os
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import skulk

from skulk import wire
from skulk.frames import StreamFrame
from skulk.wire import Limits, Ping, Startup, StreamInvoke, decode_header, encode_packet

HERE = os.path.dirname(os.path.abspath(__file__))
PROVIDER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, %r)
    import skulk

    async def block(call, frames):
        time.sleep(call.arguments["s"])  # blocks the event loop on purpose
        yield call.completed({})

    async def count(call, frames):
        for i in range(call.arguments["n"]):
            yield call.chunk({"i": i})
        yield call.completed({"n": call.arguments["n"]})

    async def lone(call, frames):
        yield call.chunk({"first": True})
        time.sleep(call.arguments["s"])  # blocks the event loop right after a yield
        yield call.completed({})

    import atexit, os
    atexit.register(lambda: os.write(2, f"ATEXIT switchinterval={sys.getswitchinterval():g}\\n".encode()))
    skulk.main([skulk.Tool("block", block), skulk.Tool("count", count), skulk.Tool("lone", lone)])
    """
) % os.path.dirname(os.path.dirname(skulk.__file__))


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, p):
        h, a = encode_packet(p)
        self.sock.sendall(h + bytes(a))

    def read(self, timeout=5.0):
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 8:
                h, a = struct.unpack_from(">II", self.buf)
                if len(self.buf) >= 8 + h + a:
                    p = decode_header(self.buf[8 : 8 + h], a)
                    if a:
                        p.media.data = self.buf[8 + h : 8 + h + a]
                    self.buf = self.buf[8 + h + a :]
                    return p
            b = self.sock.recv(65536)
            if not b:
                raise EOFError
            self.buf += b


class ChildTest(unittest.TestCase):
    PROVIDER = PROVIDER
    TOOLS = ["block", "count", "lone"]

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="skulk-py-")
        os.chmod(self.dir, 0o700)
        script = os.path.join(self.dir, "provider.py")
        with open(script, "w") as f:
            f.write(self.PROVIDER)
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.path = os.path.join(self.dir, "streams.sock")
        ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ln.bind(self.path)
        ln.listen()
        env = {"PATH": os.environ.get("PATH", ""), "SKULK_PROTOCOL": "1", "SKULK_CONTROL_FD": "3", "SKULK_STREAMS_FD": "4", "SKULK_CHILD_ID": "t",
               "PYTHONPATH": os.path.dirname(os.path.dirname(skulk.__file__))}

        def fds():
            os.dup2(child.fileno(), 3)
            os.dup2(ln.fileno(), 4)

        self.proc = subprocess.Popen([sys.executable, script], env=env, preexec_fn=fds, stdin=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, close_fds=False, start_new_session=True)
        child.close()
        ln.close()
        self.ctl = Conn(host)
        try:
            hello = self.ctl.read()
        except EOFError:
            self.proc.wait(5)
            self.fail("the child ended before hello: " + self.proc.stderr.read().decode(errors="replace")[-2000:])
        self.assertIsInstance(hello, wire.Hello)
        self.assertEqual([t.id for t in hello.tools], self.TOOLS)
        self.ctl.send(Startup(1, "t", Limits(65536, 16777216), 1000, 1000, 8))

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()
        self.ctl.sock.close()
        for n in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, n))
        os.rmdir(self.dir)

    def dial(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        self.addCleanup(s.close)
        return Conn(s)

    def ping(self, nonce):
        t0 = time.monotonic()
        self.ctl.send(Ping(nonce))
        p = self.ctl.read()
        self.assertIsInstance(p, wire.Pong)
        self.assertEqual(p.nonce, nonce)
        return p, time.monotonic() - t0

    def test_pong_while_a_handler_blocks_the_loop(self):
        s = self.dial()
        s.send(StreamInvoke("b1", "block", {"s": 1.5}))
        s.send(StreamFrame("b1", "caller_to_provider", 0, "started"))
        s.send(StreamFrame("b1", "caller_to_provider", 1, "completed"))
        deadline = time.monotonic() + 5
        while self.ping(1)[0].streams != 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        worst = 0.0
        for n in range(2, 40):  # about a second, while the loop is blocked
            p, el = self.ping(n)
            worst = max(worst, el)
            if p.streams == 0:
                break
            time.sleep(0.02)
        self.assertLess(worst, 0.5, "pong delayed by a handler blocking the event loop")
        got = [s.read(), s.read()]
        self.assertEqual([getattr(g, "kind", None) for g in got], ["completed", "end"])

    def test_stuck_while_a_handler_blocks_the_loop(self):
        # A control cancel of a handler that blocks the loop: after
        # cancel_grace_ms (1 s here) pong counts it stuck, although the
        # loop has not run since the cancel arrived.
        s = self.dial()
        s.send(StreamInvoke("b4", "block", {"s": 2.5}))
        s.send(StreamFrame("b4", "caller_to_provider", 0, "started"))
        while self.ping(1)[0].streams != 1:
            time.sleep(0.01)
        self.ctl.send(wire.Cancel("b4", ""))
        p, _ = self.ping(2)
        self.assertEqual((p.streams, p.stuck), (1, 0), "stuck before cancel_grace_ms")
        time.sleep(1.3)
        p, _ = self.ping(3)
        self.assertEqual((p.streams, p.stuck), (1, 1), "a cancelled handler blocking the loop past cancel_grace_ms")

    def test_control_attachment_refused_at_the_prefix(self):
        # Only the prefix is sent: a child that waited for the 1 MB
        # attachment before refusing it would not exit.
        self.ctl.sock.sendall(struct.pack(">II", 10, 1 << 20))
        self.assertEqual(self.proc.wait(5), 1)

    def test_drain_while_a_handler_blocks_the_loop(self):
        # bye is due grace_ms + cancel_grace_ms (0.2 + 1 s) after the
        # drain; the handler blocks the loop for 4 s.
        s = self.dial()
        s.send(StreamInvoke("b5", "block", {"s": 4}))
        s.send(StreamFrame("b5", "caller_to_provider", 0, "started"))
        while self.ping(1)[0].streams != 1:
            time.sleep(0.01)
        t0 = time.monotonic()
        self.ctl.send(wire.Drain(200))
        p = self.ctl.read(timeout=5)
        self.assertIsInstance(p, wire.Bye)
        self.assertGreaterEqual(time.monotonic() - t0, 1.0)
        self.assertEqual(self.proc.wait(5), 0)
        self.assertLess(time.monotonic() - t0, 3.0, "drain outlasted its bound by far")
        with self.assertRaises(EOFError):  # one bye, then EOF
            self.ctl.read(timeout=5)

    def test_control_eof_exits_within_a_second(self):
        s = self.dial()
        s.send(StreamInvoke("b2", "block", {"s": 5}))
        s.send(StreamFrame("b2", "caller_to_provider", 0, "started"))
        while self.ping(1)[0].streams != 1:
            time.sleep(0.01)
        t0 = time.monotonic()
        self.ctl.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(self.proc.wait(5), 0)
        self.assertLess(time.monotonic() - t0, 1.1)

    def test_main_returns_normally_when_the_host_is_gone(self):
        # No os._exit: atexit handlers run, and main changed no
        # process-wide setting it was not asked to.
        s = self.dial()
        s.send(StreamInvoke("c0", "count", {"n": 1}))
        s.send(StreamFrame("c0", "caller_to_provider", 0, "started"))
        s.send(StreamFrame("c0", "caller_to_provider", 1, "completed"))
        self.assertEqual([s.read().kind, s.read().kind, type(s.read())], ["chunk", "completed", wire.StreamEnd])
        self.ctl.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(self.proc.wait(5), 0)
        self.assertIn(b"ATEXIT switchinterval=0.005", self.proc.stderr.read())

    def test_main_returns_normally_after_a_drain(self):
        self.ctl.send(wire.Drain(100))
        self.assertIsInstance(self.ctl.read(timeout=5), wire.Bye)
        self.assertEqual(self.proc.wait(5), 0)
        self.assertIn(b"ATEXIT", self.proc.stderr.read())

    def test_a_lone_frame_is_written_at_once(self):
        # Frames yielded back to back are coalesced until the loop runs
        # again; the first one is not held back, even when the handler
        # then blocks the loop.
        s = self.dial()
        s.send(StreamInvoke("l1", "lone", {"s": 3}))
        s.send(StreamFrame("l1", "caller_to_provider", 0, "started"))
        t0 = time.monotonic()
        f = s.read(timeout=10)
        self.assertEqual(f.payload, {"first": True})
        self.assertLess(time.monotonic() - t0, 2.0, "the chunk waited for the blocked loop")

    def test_count(self):
        s = self.dial()
        s.send(StreamInvoke("c1", "count", {"n": 3}))
        s.send(StreamFrame("c1", "caller_to_provider", 0, "started"))
        s.send(StreamFrame("c1", "caller_to_provider", 1, "completed"))
        got = [s.read() for _ in range(5)]
        self.assertEqual([g.sequence for g in got[:4]], [1, 2, 3, 4])
        self.assertEqual(got[3].payload, {"n": 3})
        self.assertIsInstance(got[4], wire.StreamEnd)



APP = textwrap.dedent(
    """
    import asyncio, atexit, os, sys
    sys.path.insert(0, %r)
    import skulk

    atexit.register(lambda: os.write(2, b"ATEXIT\\n"))
    ticks = 0
    seen = []

    async def tick():
        global ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    async def ticks_tool(call, frames):
        yield call.completed({"ticks": ticks})

    async def dispatch(startup, call, tool):
        seen.append(call.call_id)
        await skulk.execute_stream(startup, call, tool.handler)

    async def app():
        t = asyncio.create_task(tick())
        status = await skulk.serve([skulk.Tool("ticks", ticks_tool)], dispatch=dispatch)
        t.cancel()
        os.write(2, f"SERVED {status} {seen} {sys.getswitchinterval()}\\n".encode())

    asyncio.run(app())
    """
) % os.path.dirname(os.path.dirname(skulk.__file__))


class AppLoopTest(ChildTest):
    """serve() in an application's own asyncio loop: the application's
    tasks go on beside the calls, each call goes through the
    application's dispatch to execute_stream, and serve returns the exit
    status instead of ending the process."""

    PROVIDER = APP
    TOOLS = ["ticks"]

    def call_ticks(self, cid):
        s = self.dial()
        s.send(StreamInvoke(cid, "ticks", {}))
        s.send(StreamFrame(cid, "caller_to_provider", 0, "started"))
        s.send(StreamFrame(cid, "caller_to_provider", 1, "completed"))
        f, end = s.read(), s.read()
        self.assertEqual((f.kind, type(end)), ("completed", wire.StreamEnd))
        return f.payload["ticks"]

    def test_app_and_calls_share_the_loop(self):
        first = self.call_ticks("t1")
        p, _ = self.ping(7)
        self.assertEqual(p.streams, 0)
        time.sleep(0.2)
        self.assertGreater(self.call_ticks("t2"), first, "the application's own task did not run")
        self.ctl.send(wire.Drain(100))
        self.assertIsInstance(self.ctl.read(timeout=5), wire.Bye)
        self.assertEqual(self.proc.wait(5), 0)
        err = self.proc.stderr.read()
        self.assertIn(b"SERVED 0 ['t1', 't2'] 0.005", err)
        self.assertIn(b"ATEXIT", err)

    def test_host_gone_returns_zero(self):
        self.ctl.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(self.proc.wait(5), 0)
        self.assertIn(b"SERVED 0 [] 0.005", self.proc.stderr.read())

    def test_control_protocol_error_returns_one(self):
        self.ctl.sock.sendall(struct.pack(">II", 10, 1 << 20))
        self.assertEqual(self.proc.wait(5), 0)
        self.assertIn(b"SERVED 1 []", self.proc.stderr.read())

    # The ChildTest cases that need main()'s tools do not apply here.
    test_pong_while_a_handler_blocks_the_loop = None  # type: ignore[assignment]
    test_stuck_while_a_handler_blocks_the_loop = None  # type: ignore[assignment]
    test_control_attachment_refused_at_the_prefix = None  # type: ignore[assignment]
    test_drain_while_a_handler_blocks_the_loop = None  # type: ignore[assignment]
    test_control_eof_exits_within_a_second = None  # type: ignore[assignment]
    test_main_returns_normally_when_the_host_is_gone = None  # type: ignore[assignment]
    test_main_returns_normally_after_a_drain = None  # type: ignore[assignment]
    test_count = None  # type: ignore[assignment]
    test_a_lone_frame_is_written_at_once = None  # type: ignore[assignment]



EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")


class AppLoopExampleTest(AppLoopTest):
    """python/examples/app_loop.py as a host starts it."""

    with open(os.path.join(EXAMPLES, "app_loop.py")) as _f:
        PROVIDER = _f.read()
    TOOLS = ["status"]
    test_app_and_calls_share_the_loop = None  # type: ignore[assignment]
    test_host_gone_returns_zero = None  # type: ignore[assignment]
    test_control_protocol_error_returns_one = None  # type: ignore[assignment]

    def call_status(self, cid):
        s = self.dial()
        s.send(StreamInvoke(cid, "status", {}))
        s.send(StreamFrame(cid, "caller_to_provider", 0, "started"))
        s.send(StreamFrame(cid, "caller_to_provider", 1, "completed"))
        f, end = s.read(), s.read()
        self.assertEqual((f.kind, type(end)), ("completed", wire.StreamEnd))
        return f.payload

    def test_example(self):
        first = self.call_status("s1")
        self.assertEqual(first["request_id"], "s1")
        time.sleep(0.35)
        self.assertGreater(self.call_status("s2")["ticks"], first["ticks"])
        self.ctl.send(wire.Drain(100))
        self.assertIsInstance(self.ctl.read(timeout=5), wire.Bye)
        self.assertEqual(self.proc.wait(5), 0)


if __name__ == "__main__":
    unittest.main()
