"""Calls a handler makes through its host (docs/protocol.md §8): the
host's startup offers tools on a call socket; ``call.call(tool, args)``
dials it, one call per connection, and speaks the stream protocol with
the roles swapped: the child writes the invoke and the caller frames, the
host answers provider frames from sequence 1, one terminal, then ``end``.

A :class:`NestedCall` (declared in skulk.nested, implemented here) has one
reader task, owned by the child runtime, that reads the host's frames in
order (fenced) and hands each to the handler as it asks for it: a handler
that does not read holds up the callee's output (backpressure), never the
child's memory. What this module needs of the child runtime and of the
handler's call is declared here as protocols (_Runtime, _Owner), which
skulk.child implements.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import deque
from typing import Any, Optional, Protocol

from ._conn import Conn
from .errors import (
    ErrorCode,
    CallClosedError,
    CallError,
    CallsOffError,
    ConnectionClosed,
    DepthError,
    FieldError,
    InvalidPacketError,
    NotOfferedError,
    ProtocolError,
    SequenceError,
    TooManyCallsError,
)
from .frames import Direction, FrameKind, JsonObject, Media, StreamEnd, StreamError, StreamFrame, check_object
from .nested import CallStart, NestedCall
from .sequence import Sequence
from .wire import Calls, Limits, Schema, StreamInvoke, ToolDescriptor, encode_packet

__all__ = ["NestedCall", "CallStart"]

CALLER: Direction = "caller_to_provider"
PROVIDER: Direction = "provider_to_caller"
#: How long the host's end may take to follow its terminal before the
#: connection is closed anyway (and not reused).
END_WAIT = 1.0
#: The least a call left open gets to end after its cancel.
MIN_GRACE = 0.01


def _new_id() -> str:
    """A call id for a call connection: "n" and 24 random hex digits."""
    return "n" + os.urandom(12).hex()


def _fill_defaults(args: JsonObject, schema: Optional[Schema]) -> JsonObject:
    """args with the schema's top-level property defaults filled in where
    a key is missing (what the host does before it checks)."""
    if not schema:
        return args
    props = schema.get("properties")
    if not isinstance(props, dict):
        return args
    out = dict(args)
    for k, p in props.items():
        if k not in out and isinstance(p, dict) and "default" in p:
            out[k] = p["default"]
    return out


class _Offer:
    """What the host's startup offered: its tools and their compiled
    schemas (when jsonschema is installed), and the calls now open."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.tools: dict[str, ToolDescriptor] = {t.id: t for t in calls.tools}
        self._validators: dict[tuple[str, str], Any] = {}
        # Calls open (and places taken by calls being dialed): at most
        # calls.max_in_flight.
        self.open: set[object] = set()
        # Idle call connections, each left by a call that ended cleanly
        # (docs/protocol.md §8 item 3): at most calls.max_in_flight; one
        # more is closed.
        self.idle: list[Conn] = []

    def take_idle(self) -> Optional[Conn]:
        """An idle call connection to reuse, or None: dial a new one."""
        while self.idle:
            c = self.idle.pop()
            if not c.closed and not c.broken:
                return c
        return None

    def give_back(self, conn: Conn) -> None:
        """Keep conn for the next call, or close it when enough are idle."""
        if len(self.idle) < self.calls.max_in_flight and not conn.closed and not conn.broken:
            self.idle.append(conn)
        else:
            conn.close()

    def close_idle(self) -> None:
        """Close every idle call connection (the child is stopping)."""
        idle, self.idle = self.idle, []
        for c in idle:
            c.close()

    def validator(self, tool: ToolDescriptor, which: str) -> Any:
        """The compiled arguments or input schema of tool, or None when it
        has none or jsonschema is not installed."""
        schema = tool.arguments_schema if which == "arguments" else tool.input_schema
        if schema is None:
            return None
        key = (tool.id, which)
        if key not in self._validators:
            try:
                from .schema import _compile

                self._validators[key] = _compile(which, schema)
            except ImportError:
                self._validators[key] = None
        return self._validators[key]


def _check(v: Any, which: str, payload: JsonObject) -> None:
    if v is not None:
        from .schema import _check as check

        check(v, which, payload)


class _Runtime(Protocol):
    """What a call through the host needs of the child runtime (skulk.child
    implements it): its loop, the owner of the calls' reader tasks, the
    host's offer, the child's limits and the cancel grace."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def nested_tasks(self) -> set[asyncio.Task[None]]: ...

    @property
    def offer(self) -> Optional[_Offer]: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def cancel_grace(self) -> float: ...


class _Owner(Protocol):
    """What a call through the host needs of the handler's call that makes
    it (skulk.child implements it): its invoke, its deadline, and the set
    of its calls not ended, which the call leaves as it ends."""

    @property
    def inv(self) -> StreamInvoke: ...

    @property
    def deadline(self) -> Optional[float]: ...

    @property
    def nested(self) -> set[_NestedCall]: ...


class _NestedCall(NestedCall):
    """A NestedCall on a call connection to the host, read by its own
    reader task."""

    def __init__(self, rt: _Runtime, owner: Optional[_Owner], offer: _Offer, tool: ToolDescriptor,
                 call_id: str, conn: Conn, whole: Optional[int] = None) -> None:
        """whole is the count of input payloads written with the invoke,
        then the caller's completed (the direction closed), or None."""
        self._rt = rt
        self._owner = owner
        self._offer = offer
        self._tool = tool
        self._id = call_id
        self._conn = conn
        self._next = 1 if whole is None else whole + 2  # the next caller sequence
        self._send_done = whole is not None
        self._cancelled = False
        self._discard = False  # frames not read yet are dropped: cancelled or abandoned
        # Provider chunks read and not yet taken: at most one (the
        # reader waits while it is full).
        self._q: deque[StreamFrame] = deque()
        self._getter: Optional[asyncio.Future[None]] = None
        self._putter: Optional[asyncio.Future[None]] = None
        self._term: Optional[StreamFrame] = None
        self._eof = False
        self.done: asyncio.Future[None] = rt.loop.create_future()  # resolved once the call ended
        self._reader: Optional[asyncio.Task[None]] = None
        self._fence = Sequence(call_id, PROVIDER, next_sequence=1)
        self._made_up = False

    @property
    def id(self) -> str:
        return self._id

    @property
    def terminal(self) -> Optional[StreamFrame]:
        return self._term

    @property
    def synthetic(self) -> bool:
        return self._made_up

    def _start(self) -> None:
        self._reader = self._rt.loop.create_task(self._read())
        self._rt.nested_tasks.add(self._reader)
        self._reader.add_done_callback(self._rt.nested_tasks.discard)

    # ---------- sending ----------

    async def send(self, payload: Optional[JsonObject] = None, media: Optional[Media] = None) -> None:
        if payload is not None:
            check_object(payload)
            _check(self._offer.validator(self._tool, "input"), "input", payload)
        if self._send_done or self._term is not None:
            raise CallClosedError("send on a closed call")
        f = StreamFrame(self._id, CALLER, self._next, "chunk", payload, media)
        head, att = encode_packet(f, self._conn.limits)
        self._next += 1
        try:
            await self._conn.write(head, att)
        except ConnectionClosed:
            raise ConnectionClosed("call connection to the host broke") from None

    async def close_send(self) -> None:
        if self._send_done:
            raise CallClosedError("close_send on a closed call")
        self._send_done = True
        if self._term is not None:
            return
        self._send_terminal("completed")

    def _send_terminal(self, kind: FrameKind) -> None:
        err = StreamError("cancelled", "cancelled by the caller") if kind == "cancelled" else None
        f = StreamFrame(self._id, CALLER, self._next, kind, error=err)
        self._next += 1
        head, _ = encode_packet(f, self._conn.limits)
        self._conn.send_nowait(head)

    def _cancel_nowait(self) -> None:
        """Cancel without waiting. A cancel is a hang-up (docs/protocol.md
        §8 item 6), which the host sees even while it does not read the
        connection (its callee takes no input): when the direction is
        open and the caller's cancelled can be written at once, it is,
        and the connection's writing is shut down (the host cancels the
        callee and answers its terminal); else the connection is closed
        (the host cancels the callee; the terminal is a synthetic
        cancelled)."""
        self._cancelled = True
        self._abandon()
        if self._term is not None:
            return
        if not self._send_done:
            self._send_done = True
            if self._conn.pending() == 0:
                self._send_terminal("cancelled")
                if self._conn.shutdown_write():
                    return
        self._conn.close()

    async def cancel(self) -> None:
        self._cancel_nowait()
        await self._end_within(max(self._rt.cancel_grace, MIN_GRACE))

    async def _end_within(self, grace: float) -> None:
        if self.done.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.done), grace)
        except asyncio.TimeoutError:
            self._conn.close()
            await asyncio.shield(self.done)

    def _abandon(self) -> None:
        """Stop handing frames to the handler: what is queued is dropped
        and the reader no longer waits for a reader."""
        self._discard = True
        self._q.clear()
        _wake(self._putter)

    # ---------- reading ----------

    async def __anext__(self) -> StreamFrame:
        while True:
            if self._eof:
                raise StopAsyncIteration
            if self._q:
                f = self._q.popleft()
                _wake(self._putter)
                return f
            if self._term is not None:
                self._eof = True
                return self._term
            fut = self._rt.loop.create_future()
            self._getter = fut
            try:
                await fut
            finally:
                self._getter = None

    async def wait(self) -> Optional[JsonObject]:
        async for _ in self:
            pass
        t = self._term
        assert t is not None
        if t.kind == "completed":
            return t.payload
        raise _call_error(t, self._made_up)

    async def _put(self, f: StreamFrame) -> None:
        while self._q and not self._discard:
            fut = self._rt.loop.create_future()
            self._putter = fut
            try:
                await fut
            finally:
                self._putter = None
        if self._discard:
            return
        self._q.append(f)
        _wake(self._getter)

    async def _read(self) -> None:
        """The reader task: the host's provider frames, fenced, up to the
        terminal and its end; a broken connection gives a synthetic
        terminal. A connection whose call ended in step goes back to the
        idle list for the next call; any other is closed."""
        fence = self._fence
        term: Optional[StreamFrame] = None
        ended = False  # the host's terminal and end came, in step
        try:
            while True:
                try:
                    pkt = await self._conn.read_packet()
                except (InvalidPacketError, ProtocolError):
                    term = self._synthetic("invalid_frame", "invalid frame from the host")
                    return
                except (ConnectionClosed, OSError):
                    if self._cancelled:
                        term = self._synthetic("cancelled", "cancelled")
                    else:
                        term = self._synthetic("unreachable", "call connection to the host broke")
                    return
                if type(pkt) is not StreamFrame or pkt.call_id != self._id:
                    term = self._synthetic("invalid_frame", "invalid frame from the host")
                    return
                try:
                    fence.accept(pkt)
                except SequenceError:
                    term = self._synthetic("invalid_frame", "invalid frame from the host")
                    return
                if pkt.is_terminal():
                    term = pkt
                    try:
                        end = await asyncio.wait_for(self._conn.read_packet(), END_WAIT)
                        ended = type(end) is StreamEnd and end.call_id == self._id
                    except (asyncio.TimeoutError, ConnectionClosed, ProtocolError, InvalidPacketError, OSError):
                        pass
                    return
                await self._put(pkt)
        except asyncio.CancelledError:
            term = self._synthetic("cancelled", "cancelled")
            raise
        finally:
            if term is None:
                term = self._synthetic("unreachable", "call connection to the host broke")
            self._term = term
            # A connection whose call ended in step is reused (§6, §8):
            # the caller's direction is ended first when it was not; one
            # a cancel shut down or closed is not.
            if ended and not self._cancelled and not self._send_done:
                self._send_done = True
                self._send_terminal("completed")
            if ended and not self._cancelled:
                self._offer.give_back(self._conn)
            else:
                self._conn.close()
            self._offer.open.discard(self)
            if self._owner is not None:
                self._owner.nested.discard(self)
            _wake(self._getter)
            _wake(self.done)

    def _synthetic(self, code: ErrorCode, message: str) -> StreamFrame:
        """A terminal the SDK makes up: the connection broke first."""
        self._made_up = True
        seq = self._fence.next_sequence
        return StreamFrame(self._id, PROVIDER, seq, "cancelled" if code == "cancelled" else "failed",
                           error=StreamError(code, message))


def _call_error(t: StreamFrame, synthetic: bool) -> CallError:
    e = t.error
    code = e.code if e is not None else "cancelled"
    return CallError(code, e.message if e is not None else "", synthetic)


def _wake(fut: Optional[asyncio.Future[None]]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


async def start_call(rt: _Runtime, cl: _Owner, tool: str, arguments: Optional[JsonObject], detached: bool,
                     timeout: Optional[float], whole: Optional[list[JsonObject]] = None) -> NestedCall:
    """Start a call through the host for the handler's call cl (what
    awaiting ``call.call(tool, arguments, ...)`` does, see
    StreamInvoke.call): check it against the host's offer, then write its
    invoke and started on an idle call connection or a new one; with
    whole (the call's whole input), its chunks and the caller's
    completed go in the same write."""
    of = rt.offer
    if of is None:
        raise CallsOffError()
    t = of.tools.get(tool)
    if t is None:
        raise NotOfferedError()
    depth = cl.inv.depth + 1
    if not detached and depth > of.calls.max_depth:
        raise DepthError(depth, of.calls.max_depth)
    args: JsonObject = {} if arguments is None else arguments
    check_object(args, "arguments")
    args = _fill_defaults(args, t.arguments_schema)
    _check(of.validator(t, "arguments"), "arguments", args)
    timeout_ms = 0
    if timeout is not None:
        if timeout <= 0:
            raise FieldError("timeout", "must be > 0")
        timeout_ms = max(1, int(timeout * 1000))
    elif not detached and cl.deadline is not None:
        timeout_ms = max(1, int((cl.deadline - rt.loop.time()) * 1000))
    if len(of.open) >= of.calls.max_in_flight:
        raise TooManyCallsError()
    inv = StreamInvoke(_new_id(), tool, args, timeout_ms, cl.inv.trace, parent=cl.inv.call_id, detached=detached)
    inv.check()
    head, _ = encode_packet(inv, rt.limits)
    started, _ = encode_packet(StreamFrame(inv.call_id, CALLER, 0, "started"), rt.limits)
    first = [head, started]
    if whole is not None:
        v = of.validator(t, "input")
        for i, p in enumerate(whole, 1):  # nothing is sent before the last is checked
            check_object(p, "input")
            _check(v, "input", p)
            first.append(encode_packet(StreamFrame(inv.call_id, CALLER, i, "chunk", p), rt.limits)[0])
        first.append(encode_packet(StreamFrame(inv.call_id, CALLER, len(whole) + 1, "completed"), rt.limits)[0])
    owner = None if detached else cl
    conn = of.take_idle()
    if conn is not None:
        return _begin(rt, owner, of, t, inv, conn, b"".join(first), whole)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    # The place is taken before the first await, so that calls made
    # at once cannot pass max_in_flight together.
    placeholder = _Placeholder()
    of.open.add(placeholder)
    try:
        await rt.loop.sock_connect(sock, of.calls.socket)
    except OSError:
        sock.close()
        of.open.discard(placeholder)
        raise CallError("unreachable", "dialing the host's call socket failed", True) from None
    except BaseException:
        sock.close()
        of.open.discard(placeholder)
        raise
    of.open.discard(placeholder)
    return _begin(rt, owner, of, t, inv, Conn(sock, rt.loop, rt.limits), b"".join(first), whole)


def _begin(rt: _Runtime, owner: Optional[_Owner], of: _Offer, t: ToolDescriptor, inv: StreamInvoke, conn: Conn,
           first: bytes, whole: Optional[list[JsonObject]]) -> _NestedCall:
    """Start the call on conn: register it and write its invoke and
    started (and, with whole, its input and completed: the caller's
    direction is then closed)."""
    n = _NestedCall(rt, owner, of, t, inv.call_id, conn, None if whole is None else len(whole))
    of.open.add(n)
    if owner is not None:
        owner.nested.add(n)
    conn.send_nowait(first)
    n._start()
    return n


class _Placeholder:
    """Holds an in-flight place while a call's connection is dialed."""
