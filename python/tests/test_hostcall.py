"""Calls a handler makes through its host (docs/protocol.md §8), driven by
skulk.testing on the SDK's real stream path, with the host's call socket
played by a real Unix socket server in the test."""

from __future__ import annotations

import asyncio
import os
import select
import tempfile
import unittest
from typing import AsyncIterator, Awaitable, Callable, Optional
from unittest import mock

import skulk
from skulk import StreamEnd, StreamError, StreamFrame, StreamInvoke
from skulk._conn import Conn
from skulk.frames import Bytes
from skulk.testing import run_tool
from skulk.wire import Calls, Limits, ToolDescriptor, read_packet, write_packet

LOOKUP = ToolDescriptor("lookup", arguments_schema={
    "type": "object", "properties": {"word": {"type": "string"}, "lang": {"type": "string", "default": "en"}},
    "required": ["word"], "additionalProperties": False})
ECHO = ToolDescriptor("echo", input_schema={"type": "object", "required": ["text"]})
LIM = Limits().effective()

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def pframe(cid: str, seq: int, kind: str, payload: Optional[dict[str, object]] = None,
           error: Optional[StreamError] = None) -> StreamFrame:
    return StreamFrame(cid, "provider_to_caller", seq, kind, payload, error=error)  # type: ignore[arg-type]


async def caller_frames(r: asyncio.StreamReader) -> list[StreamFrame]:
    """The caller's frames of one call as the host reads them, up to and
    including the terminal."""
    got = []
    while True:
        f = await read_packet(r, LIM)
        assert isinstance(f, StreamFrame)
        got.append(f)
        if f.is_terminal():
            return got


class HostCallTest(unittest.IsolatedAsyncioTestCase):
    """The host's side is a server on a call socket; each test's serve
    function plays one call connection."""

    async def asyncSetUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="skc")
        self.sock = os.path.join(self.dir, "calls.sock")
        self.conns = 0
        self.log: list[str] = []  # what the host saw and did, in order
        self.serve: Optional[Serve] = None
        self.handlers: list[asyncio.Task[None]] = []

        async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.conns += 1
            t = asyncio.current_task()
            assert t is not None
            self.handlers.append(t)
            try:
                if self.serve is not None:
                    await self.serve(r, w)
            finally:
                w.close()

        self.server = await asyncio.start_unix_server(accept, path=self.sock)

    async def asyncTearDown(self) -> None:
        self.server.close()
        await self.server.wait_closed()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        os.rmdir(self.dir) if not os.listdir(self.dir) else None

    def calls(self, *tools: ToolDescriptor, max_depth: int = 2, max_in_flight: int = 4) -> Calls:
        return Calls(self.sock, list(tools) or [LOOKUP, ECHO], max_depth, max_in_flight)

    async def test_round_trip(self) -> None:
        """The invoke names the handler's call as parent, with the
        arguments' defaults filled; the caller's started, chunk and
        completed follow; the host's chunk and completed reach the
        handler as iteration yields them, the terminal last."""
        seen: dict[str, object] = {}

        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            inv = await read_packet(r, LIM)
            assert isinstance(inv, StreamInvoke)
            seen["invoke"] = inv
            seen["caller"] = [(f.sequence, f.kind, f.payload) for f in await caller_frames(r)]
            await write_packet(w, pframe(inv.call_id, 1, "chunk", {"text": "f"}), LIM)
            await write_packet(w, pframe(inv.call_id, 2, "completed", {"len": 3}), LIM)
            await write_packet(w, StreamEnd(inv.call_id), LIM)

        self.serve = host

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            async with call.call("lookup", {"word": "fox"}) as nested:
                await nested.send({"q": 1})
                await nested.close_send()
                kinds = []
                async for f in nested:
                    kinds.append(f.kind)
                    if f.kind == "chunk":
                        yield call.chunk(f.payload)
                yield call.completed({"kinds": kinds, "result": await nested.wait(), "synthetic": nested.synthetic})

        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls(), depth=1)
        self.assertEqual(res.outcome, "completed", res.error)
        self.assertEqual(res.payloads, [{"text": "f"}])
        self.assertEqual(res.result, {"kinds": ["chunk", "completed"], "result": {"len": 3}, "synthetic": False})
        inv = seen["invoke"]
        assert isinstance(inv, StreamInvoke)
        self.assertEqual((inv.tool_id, inv.parent, inv.detached), ("lookup", "test-call", False))
        self.assertEqual(inv.arguments, {"word": "fox", "lang": "en"})
        self.assertTrue(inv.call_id.startswith("n") and len(inv.call_id) == 25, inv.call_id)
        self.assertEqual(seen["caller"], [(0, "started", None), (1, "chunk", {"q": 1}), (2, "completed", None)])

    async def test_refused_locally(self) -> None:
        """What the offer rules out is refused with a typed error before
        anything is dialed: no offer, a tool not offered, the depth, the
        arguments' schema, the input's schema."""
        errs: list[BaseException] = []

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            for tool, args in (("nope", None), ("lookup", {"word": 5}), ("lookup", None)):
                try:
                    await call.call(tool, args)
                except skulk.SkulkError as e:
                    errs.append(e)
            yield call.completed()

        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls(max_depth=3), depth=1)
        self.assertEqual(res.outcome, "completed")
        self.assertIsInstance(errs[0], skulk.NotOfferedError)
        self.assertIsInstance(errs[1], skulk.SchemaError)
        assert isinstance(errs[1], skulk.SchemaError)
        self.assertEqual((errs[1].schema, errs[1].field, errs[1].keyword), ("arguments", "/word", "type"))
        self.assertNotIn("5", str(errs[1]).replace("arguments", ""))
        self.assertIsInstance(errs[2], skulk.SchemaError)  # word is required
        self.assertEqual(len(errs), 3)

        errs.clear()
        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls(max_depth=2), depth=2)
        self.assertIsInstance(errs[2], skulk.DepthError)
        assert isinstance(errs[2], skulk.DepthError)
        self.assertEqual((errs[2].depth, errs[2].limit), (3, 2))
        self.assertIn("depth 3", str(errs[2]))

        errs.clear()
        res = await run_tool(skulk.Tool("ask", ask), {})
        self.assertTrue(all(isinstance(e, skulk.CallsOffError) for e in errs) and len(errs) == 3, errs)
        self.assertEqual(self.conns, 0)

    async def test_input_schema_and_too_many(self) -> None:
        """A chunk that breaks the input schema is refused, nothing sent;
        a call past max_in_flight is refused; a detached call passes the
        depth limit and the handler's end leaves it alone."""
        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            inv = await read_packet(r, LIM)
            assert isinstance(inv, StreamInvoke)
            self.log.append(f"invoke detached={inv.detached}")
            self.log.extend(f.kind for f in await caller_frames(r))
            try:
                await read_packet(r, LIM)
            except (skulk.ConnectionClosed, OSError):
                self.log.append("closed")

        self.serve = host
        out: dict[str, object] = {}

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            n = await call.call("echo", detached=True)
            out["nested"] = n
            try:
                await n.send({"no": "text"})
            except skulk.SchemaError as e:
                out["input"] = (e.schema, e.field, e.keyword)
            try:
                await call.call("echo", detached=True)
            except skulk.TooManyCallsError as e:
                out["too_many"] = str(e)
            await n.close_send()
            try:
                await n.close_send()
            except skulk.CallClosedError:
                out["closed"] = True
            yield call.completed()

        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls(max_depth=1, max_in_flight=1), depth=1)
        self.assertEqual(res.outcome, "completed", res.error)
        self.assertEqual(out["input"], ("input", "/text", "required"))
        self.assertEqual(out["too_many"], "too many calls in flight through the host")
        self.assertTrue(out["closed"])
        n = out["nested"]
        assert isinstance(n, skulk.NestedCall)
        # Detached: the handler's end did not cancel it (no caller
        # cancelled); the runtime's end closed its connection.
        await asyncio.wait_for(asyncio.gather(*self.handlers, return_exceptions=True), 10)
        self.assertEqual(self.log, ["invoke detached=True", "started", "completed", "closed"])
        with self.assertRaises(skulk.CallError):
            await asyncio.wait_for(n.wait(), 10)

    async def test_failures(self) -> None:
        """The host's failed terminal comes back as a CallError with its
        code and message; a connection that closes first gives a synthetic
        unreachable; garbage a synthetic invalid_frame."""
        mode = ["failed"]

        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            inv = await read_packet(r, LIM)
            assert isinstance(inv, StreamInvoke)
            if mode[0] == "failed":
                await write_packet(w, pframe(inv.call_id, 1, "failed", error=StreamError("invalid_frame", "tool not offered")), LIM)
                await write_packet(w, StreamEnd(inv.call_id), LIM)
            elif mode[0] == "garbage":
                await write_packet(w, pframe(inv.call_id, 2, "chunk", {"a": 1}), LIM)  # a gap in the fence
                await asyncio.sleep(1)

        self.serve = host
        errs: list[skulk.CallError] = []

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            n = await call.call("lookup", {"word": "x"})
            try:
                await n.wait()
            except skulk.CallError as e:
                errs.append(e)
            yield call.completed()

        for m in ("failed", "close", "garbage"):
            mode[0] = m
            res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls())
            self.assertEqual(res.outcome, "completed", res.error)
        self.assertEqual([(e.code, e.message, e.synthetic) for e in errs], [
            ("invalid_frame", "tool not offered", False),
            ("unreachable", "call connection to the host broke", True),
            ("invalid_frame", "invalid frame from the host", True)])

        os.unlink(self.sock)  # nothing listens: dialing fails
        errs2: list[BaseException] = []

        async def dial(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            try:
                await call.call("lookup", {"word": "x"})
            except skulk.CallError as e:
                errs2.append(e)
            yield call.completed()

        await run_tool(skulk.Tool("dial", dial), {}, calls=self.calls())
        self.assertEqual([(e.code, e.synthetic) for e in errs2 if isinstance(e, skulk.CallError)], [("unreachable", True)])

    async def test_left_open_ended_before_terminal(self) -> None:
        """A call the handler leaves open is cancelled (the caller's
        cancelled) when the handler yields its terminal, and the
        handler's terminal is written only after the host's answer."""
        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            inv = await read_packet(r, LIM)
            assert isinstance(inv, StreamInvoke)
            await read_packet(r, LIM)  # started
            f = await read_packet(r, LIM)
            assert isinstance(f, StreamFrame)
            self.log.append("host saw " + f.kind)
            await asyncio.sleep(0.2)
            self.log.append("host answered")
            await write_packet(w, pframe(inv.call_id, 1, "cancelled"), LIM)
            await write_packet(w, StreamEnd(inv.call_id), LIM)

        self.serve = host
        kept: list[skulk.NestedCall] = []

        async def leave(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            kept.append(await call.call("lookup", {"word": "x"}))
            yield call.completed()

        res = await run_tool(skulk.Tool("leave", leave), {}, calls=self.calls())
        self.log.append("terminal read")
        self.assertEqual(res.outcome, "completed")
        self.assertEqual(self.log, ["host saw cancelled", "host answered", "terminal read"])
        t = kept[0].terminal
        assert t is not None
        self.assertEqual((t.kind, kept[0].synthetic), ("cancelled", False))

    async def test_cancel_and_async_with(self) -> None:
        """cancel sends the caller's cancelled and waits for the host's
        terminal, which iteration then yields alone; wait raises
        CallError cancelled. Leaving an ``async with`` block cancels a
        call after close_send by closing its connection."""
        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            inv = await read_packet(r, LIM)
            assert isinstance(inv, StreamInvoke)
            try:
                await write_packet(w, pframe(inv.call_id, 1, "chunk", {"i": 0}), LIM)
            except OSError:
                pass  # the second call's connection may be closed already
            while True:
                try:
                    f = await read_packet(r, LIM)
                except (skulk.ConnectionClosed, OSError):
                    self.log.append("closed")
                    return
                assert isinstance(f, StreamFrame)
                if f.kind == "cancelled":
                    self.log.append("cancelled")
                    await write_packet(w, pframe(inv.call_id, 2, "cancelled"), LIM)
                    await write_packet(w, StreamEnd(inv.call_id), LIM)
                    return

        self.serve = host
        out: list[object] = []

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            n = await call.call("lookup", {"word": "x"})
            await asyncio.sleep(0.05)  # the chunk is read, not taken
            await n.cancel()
            out.append([f.kind async for f in n])
            try:
                await n.wait()
            except skulk.CallError as e:
                out.append(e.code)
            async with call.call("lookup", {"word": "y"}) as m:
                await m.close_send()
            out.append((m.terminal.kind if m.terminal else None, m.synthetic))
            yield call.completed()

        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls())
        self.assertEqual(res.outcome, "completed", res.error)
        self.assertEqual(out, [["cancelled"], "cancelled", ("cancelled", True)])
        await asyncio.wait_for(asyncio.gather(*self.handlers, return_exceptions=True), 10)
        self.assertEqual(self.log, ["cancelled", "closed"])

    async def test_cancel_is_a_hang_up(self) -> None:
        """cancel writes the caller's cancelled and shuts down the
        connection's writing: a host that reads nothing (its callee takes
        no input) sees the hang-up at once, and its answer, written
        after, still reaches the handler (not synthetic)."""
        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            inv = await read_packet(r, LIM)
            assert isinstance(inv, StreamInvoke)
            sock = w.get_extra_info("socket")
            p = select.poll()
            p.register(sock.fileno(), select.POLLRDHUP)
            for _ in range(500):  # at most 5 s
                if p.poll(0):
                    break
                await asyncio.sleep(0.01)
            else:
                self.log.append("no hang-up")
                return
            self.log.append("hang-up")
            self.log.append(",".join(f.kind for f in await caller_frames(r)))
            self.log.append("eof" if await r.read(1) == b"" else "more")
            await write_packet(w, pframe(inv.call_id, 1, "cancelled"), LIM)
            await write_packet(w, StreamEnd(inv.call_id), LIM)

        self.serve = host
        out: list[object] = []

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            n = await call.call("echo")
            await n.send({"text": "a"})
            await n.cancel()
            out.append((n.terminal.kind if n.terminal else None, n.synthetic))
            yield call.completed()

        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls())
        self.assertEqual(res.outcome, "completed", res.error)
        await asyncio.wait_for(asyncio.gather(*self.handlers, return_exceptions=True), 10)
        self.assertEqual(self.log, ["hang-up", "started,chunk,cancelled", "eof"])
        self.assertEqual(out, [("cancelled", False)])

    async def test_connection_reused(self) -> None:
        """A call whose terminal and end came in step leaves its
        connection idle, and the next call takes it instead of dialing
        (docs/protocol.md §8 item 3), its caller's completed written
        first when the handler had not; a cancelled call's connection
        is not reused."""
        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while True:
                try:
                    inv = await read_packet(r, LIM)
                except (skulk.ConnectionClosed, OSError, asyncio.IncompleteReadError):
                    self.log.append("closed")
                    return
                assert isinstance(inv, StreamInvoke)
                self.log.append(inv.call_id)
                kinds = []
                while True:
                    try:
                        f = await read_packet(r, LIM)
                    except (skulk.ConnectionClosed, OSError, asyncio.IncompleteReadError):
                        self.log.append("closed")
                        return
                    assert isinstance(f, StreamFrame)
                    if f.kind == "started":
                        continue
                    kinds.append(f.kind)
                    if f.is_terminal():
                        break
                if kinds[-1] == "cancelled":
                    await write_packet(w, pframe(inv.call_id, 1, "cancelled"), LIM)
                    await write_packet(w, StreamEnd(inv.call_id), LIM)
                    continue
                await write_packet(w, pframe(inv.call_id, 1, "completed", {"ok": True}), LIM)
                await write_packet(w, StreamEnd(inv.call_id), LIM)

        self.serve = host
        ids: list[str] = []

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            for _ in range(3):
                n = await call.call("lookup", {"word": "x"})
                ids.append(n.id)
                await n.close_send()
                assert await n.wait() == {"ok": True}
            c = await call.call("lookup", {"word": "y"})
            ids.append(c.id)
            await c.cancel()
            d = await call.call("lookup", {"word": "z"})
            ids.append(d.id)
            await d.close_send()
            await d.wait()
            yield call.completed()

        res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls())
        self.assertEqual(res.outcome, "completed", res.error)
        await asyncio.wait_for(asyncio.gather(*self.handlers, return_exceptions=True), 10)
        self.assertEqual(self.conns, 2, self.log)
        self.assertEqual(self.log, ids[:4] + ["closed", ids[4], "closed"])

    async def test_whole_input(self) -> None:
        """input= sends the invoke, started, a chunk per payload and the
        caller's completed in one write; send and close_send are then
        refused; a unary call (input=()) is started and completed; a
        payload that breaks the input schema, or is not an object, is
        refused before anything is dialed."""
        async def host(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while True:
                try:
                    inv = await read_packet(r, LIM)
                except (skulk.ConnectionClosed, OSError, asyncio.IncompleteReadError):
                    return
                assert isinstance(inv, StreamInvoke)
                got = [(f.sequence, f.kind, f.payload) for f in await caller_frames(r)]
                self.log.append(repr(got))
                await write_packet(w, pframe(inv.call_id, 1, "completed", {"n": len(got)}), LIM)
                await write_packet(w, StreamEnd(inv.call_id), LIM)

        self.serve = host
        writes: list[int] = []
        send_nowait = Conn.send_nowait

        def counted(conn: Conn, head: bytes, att: Bytes = b"") -> None:
            writes.append(len(head))
            send_nowait(conn, head, att)

        out: dict[str, object] = {}

        async def ask(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
            for bad in ([{"no": "text"}], [["not", "an", "object"]]):
                try:
                    await call.call("echo", input=bad)  # type: ignore[arg-type]
                except skulk.SchemaError as e:
                    out["schema"] = (e.schema, e.field, e.keyword)
                except skulk.FieldError as e:
                    out["field"] = e.field
            out["dialed_after_refusals"] = self.conns
            writes.clear()
            n = await call.call("echo", input=[{"text": "a"}, {"text": "b"}])
            out["writes"] = len(writes)
            closed = 0
            for op in (lambda: n.send({"text": "c"}), n.close_send):
                try:
                    await op()
                except skulk.CallClosedError:
                    closed += 1
            out["closed"] = closed
            out["whole"] = await n.wait()
            u = await call.call("lookup", {"word": "w"}, input=())
            out["unary"] = await u.wait()
            yield call.completed()

        with mock.patch.object(Conn, "send_nowait", counted):
            res = await run_tool(skulk.Tool("ask", ask), {}, calls=self.calls(), depth=1)
        self.assertEqual(res.outcome, "completed", res.error)
        self.assertEqual(out["schema"], ("input", "/text", "required"))
        self.assertEqual(out["field"], "input")
        self.assertEqual(out["dialed_after_refusals"], 0)
        self.assertEqual(out["writes"], 1)
        self.assertEqual(out["closed"], 2)
        self.assertEqual(out["whole"], {"n": 4})
        self.assertEqual(out["unary"], {"n": 2})
        self.assertEqual(self.log, [
            repr([(0, "started", None), (1, "chunk", {"text": "a"}), (2, "chunk", {"text": "b"}), (3, "completed", None)]),
            repr([(0, "started", None), (1, "completed", None)]),
        ])
        self.assertEqual(self.conns, 1)  # the second call reused the first's connection


if __name__ == "__main__":
    unittest.main()
