"""The child runtime: turns a list of tools into a conforming Skulk child
(docs/protocol.md §1, §5, §6; docs/provider.md "In another language").

``serve(tools)`` runs the child in the running asyncio loop (yours, or the
one ``main(tools)`` makes); ``execute_stream(startup, call, handler)``
serves one admitted stream in the owned task serve gives each call.

Threads and tasks:

* The **control thread** owns the control connection (fd 3). It reads
  every control packet and answers ``ping`` itself, computing ``pong``'s
  counters from a registry shared under a lock, so a handler that blocks
  the event loop (``time.sleep``, CPU work) delays its own and other
  streams but never a pong. It hands ``cancel`` and ``drain`` to the event
  loop, and on control EOF it asks the loop to cancel every handler and
  end ``serve``.
* The **event loop** accepts stream connections (fd 4) and runs one reader
  task per connection and one owned task per call, which drives the
  tool's async-generator handler. Caller frames are checked (shape, fence)
  and queued for the handler in a queue of 8; while it is full the reader
  stops reading, which is the backpressure.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import inspect
import logging
import os
import socket
import struct
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable, Coroutine, Optional, Sequence as Seq

from ._version import __version__
from ._conn import Conn
from .errors import (
    AfterTerminalError,
    ConnectionClosed,
    FieldError,
    InvalidPacketError,
    ProtocolError,
    SchemaError,
    SequenceError,
    StartError,
    ToolError,
    cancelled_error,
)
from .frames import (
    ERROR_CODES,
    PROVIDER_TO_CALLER,
    InlineMedia,
    JsonObject,
    StreamEnd,
    StreamError,
    StreamFrame,
    check_object,
    sanitize_message,
)
from .hostcall import NestedCall, _NestedCall, _Offer, start_call
from .schema import OutputChecker
from .sequence import Sequence
from .wire import (
    INGRESS_QUEUE,
    PREFIX_LEN,
    Bye,
    Cancel,
    Drain,
    Hello,
    Limits,
    Packet,
    Ping,
    Pong,
    Schema,
    Startup,
    StreamInvoke,
    ToolDescriptor,
    _media_map,
    _pack,
    check_lengths,
    decode_header,
    encode_packet,
    tool_map,
)

__all__ = ["Tool", "Cause", "Input", "StreamHandler", "Output", "Dispatch", "execute_stream", "serve", "main", "SDK"]

#: The SDK's name and version as hello announces it.
SDK = "skulk-python/" + __version__

#: The logger the SDK writes to: handler tracebacks (error), start
#: failures (error), control protocol errors (error), drains cut short
#: (warning). The SDK adds no handler: without logging configured,
#: Python prints warnings and errors to stderr, which the host keeps.
log = logging.getLogger("skulk")

#: Startup must arrive within this many seconds of the child's start (§5).
STARTUP_TIMEOUT = 10.0
#: A host gone: cancelled handlers get this long to return before serve
#: returns without them.
HOST_GONE_GRACE = 0.1
#: Under main(): how long after the host is gone (or a drain's bound) the
#: process may take to end before the control thread ends it itself, for
#: an event loop a handler blocks.
HARD_EXIT_AFTER = 0.3
#: The most unknown-call cancels remembered (§6 "Call ids").
REMEMBERED_CANCELS = 1024
#: Seconds a closing connection may take to flush an invalid frame's answer.
CLOSE_FLUSH = 5.0
#: The longest delay a timer is given: about 146 years (decision 49).
_FOREVER = 146 * 365 * 86400.0


class Cause(enum.StrEnum):
    """Why a call was cancelled (``call.cause`` in a handler, ``cause`` of
    a CallCancelledError). The values are strings."""

    CALLER_CANCELLED = "caller_cancelled"  #: the caller's cancelled or failed
    CANCEL_REQUESTED = "cancel_requested"  #: a control cancel
    TIMEOUT = "timeout"  #: the invoke's timeout_ms passed
    INVALID_INPUT = "invalid_input"  #: a caller frame broke the rules
    CONN_CLOSED = "conn_closed"  #: the stream connection closed
    DRAINED = "drained"  #: a drain past its grace
    HOST_GONE = "host_gone"  #: the control connection ended


class Input:
    """The caller's chunks, in order, through a queue of 8. Iteration ends
    when the caller completes its direction (a half-close; ``result`` is
    the payload of its completed, if any) and raises CallCancelledError
    (CallTimeoutError for a timeout) when the call is cancelled."""

    __slots__ = ("_q", "_waiter", "_put_waiter", "_done", "_cause", "_discard", "result")

    def __init__(self) -> None:
        # Bounded by INGRESS_QUEUE: _put waits while it is full.
        self._q: deque[StreamFrame] = deque()
        self._waiter: Optional[asyncio.Future[None]] = None
        self._put_waiter: Optional[asyncio.Future[None]] = None
        self._done = False
        self._cause: Optional[str] = None
        self._discard = False
        #: The payload of the caller's completed, once iteration ended.
        self.result: Optional[JsonObject] = None

    def __aiter__(self) -> Input:
        return self

    async def __anext__(self) -> StreamFrame:
        while True:
            if self._cause is not None:
                raise cancelled_error(self._cause)
            if self._q:
                f = self._q.popleft()
                _wake(self._put_waiter)
                return f
            if self._done:
                raise StopAsyncIteration
            fut = asyncio.get_running_loop().create_future()
            self._waiter = fut
            try:
                await fut
            except asyncio.CancelledError:
                if self._cause is not None:
                    raise cancelled_error(self._cause) from None
                raise
            finally:
                self._waiter = None

    async def _put(self, f: StreamFrame) -> None:
        while len(self._q) >= INGRESS_QUEUE and not self._discard:
            fut = asyncio.get_running_loop().create_future()
            self._put_waiter = fut
            try:
                await fut
            finally:
                self._put_waiter = None
        if self._discard:
            return
        self._q.append(f)
        _wake(self._waiter)

    def _end(self, payload: Optional[JsonObject]) -> None:
        self._done = True
        self.result = payload
        _wake(self._waiter)

    def _cancel(self, cause: str) -> None:
        self._cause = cause
        self._close()

    def _close(self) -> None:
        self._discard = True
        self._q.clear()
        _wake(self._waiter)
        _wake(self._put_waiter)


#: A handler: an async generator function ``handler(call, frames)`` that
#: yields the call's provider frames (built with ``call.chunk``,
#: ``call.completed``, ``call.failed``), exactly one terminal among them.
#: ``frames`` is an Input; annotating it as ``AsyncIterator[StreamFrame]``
#: fits too.
StreamHandler = Callable[[StreamInvoke, Input], AsyncGenerator[StreamFrame, None]]
#: What a handler returns, to annotate one: ``async def h(call:
#: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> Output``.
Output = AsyncGenerator[StreamFrame, None]


def _is_async_gen_function(fn: object) -> bool:
    if inspect.isasyncgenfunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)
    return not inspect.isfunction(fn) and not inspect.ismethod(fn) and inspect.isasyncgenfunction(call)


@dataclass
class Tool:
    """A tool: its descriptor and its handler (a StreamHandler).

    Checked when constructed: FieldError ``tools.id`` for an id that is
    not 1..128 characters of valid UTF-8, ``tools.version`` for a version
    over 128 characters, ``tools.<schema>`` for a schema that is not a JSON
    object, and ``tools.handler`` for a handler that is not an async
    generator function (an ``async def`` with ``yield``: a plain coroutine
    function or a plain function is refused here, not when first called).
    An empty version is derived (``descriptor``)."""

    id: str
    handler: StreamHandler
    description: str = ""
    arguments_schema: Optional[Schema] = None
    input_schema: Optional[Schema] = None
    output_schema: Optional[Schema] = None
    result_schema: Optional[Schema] = None
    version: str = ""

    def __post_init__(self) -> None:
        if not _is_async_gen_function(self.handler):
            if inspect.iscoroutinefunction(self.handler):
                raise FieldError("tools.handler", "a coroutine function; a handler is an async generator (async def with yield)")
            raise FieldError("tools.handler", "not an async generator function (async def with yield)")
        if type(self.description) is not str:
            raise FieldError("tools.description", "not a string")
        for k in ("arguments_schema", "input_schema", "output_schema", "result_schema"):
            sc = getattr(self, k)
            if sc is not None:
                check_object(sc, "tools." + k)
        tool_map(ToolDescriptor(self.id, self.version))

    def descriptor(self) -> ToolDescriptor:
        """The descriptor hello announces, with the version derived when
        none is set: 24 hex digits of SHA-256 over the canonical
        descriptor, the SDK's version and the source of the handler's
        module, so it changes whenever either changes."""
        d = ToolDescriptor(
            self.id,
            "",
            self.description,
            self.arguments_schema,
            self.input_schema,
            self.output_schema,
            self.result_schema,
        )
        d.version = self.version or _derive_version(d, self.handler)
        return d


_source_hashes: dict[str, bytes] = {}


def _derive_version(d: ToolDescriptor, handler: object) -> str:
    h = hashlib.sha256(_pack(tool_map(d)))
    h.update(SDK.encode())
    try:
        path = inspect.getsourcefile(handler)  # type: ignore[arg-type]
    except TypeError:
        path = None
    if path:
        if path not in _source_hashes:
            try:
                with open(path, "rb") as f:
                    _source_hashes[path] = hashlib.sha256(f.read()).digest()
            except OSError:
                _source_hashes[path] = b""
        h.update(_source_hashes[path])
    return h.hexdigest()[:24]


def _wake(fut: Optional[asyncio.Future[None]]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


# Pre-packed pieces of a provider frame's header (docs/protocol.md §3):
# the child writes every frame of a call with the same call id and
# direction, so only the sequence and what follows are packed per frame.
_K_SEQUENCE = _pack("sequence")
_K_KIND = {k: _pack("kind") + _pack(k) for k in ("chunk", "completed", "failed", "cancelled")}
_K_PAYLOAD = _pack("payload")
_K_MEDIA = _pack("media")
_K_ERROR = _pack("error")
_prefix = struct.Struct(">II")


class _Call:
    """One admitted call: its owned task, its fences and its cancellation.
    Owned by the event loop; ``cancelled_at`` is shared with the control
    thread under the runtime's lock."""

    def __init__(self, rt: _Runtime, conn: Conn, inv: StreamInvoke, tool: Tool) -> None:
        self.rt = rt
        self.conn = conn
        self.inv = inv
        self.tool = tool
        self.fence = Sequence(inv.call_id, PROVIDER_TO_CALLER, next_sequence=1)
        self.input = Input()
        self.cause: Optional[str] = None
        self.invalid: Optional[Exception] = None
        self.cancelled_at: Optional[float] = None  # time.monotonic(), read by the control thread
        self.terminal_sent = False
        self.returned = False
        self.served = False
        self.done: asyncio.Future[None] = rt.loop.create_future()
        self.task: Optional[asyncio.Task[None]] = None
        self.deadline: Optional[float] = None
        self._timers: list[asyncio.TimerHandle] = []
        self.cancel_grace = rt.cancel_grace
        # Calls through the host this handler made that have not ended
        # (detached ones aside): at most calls.max_in_flight.
        self.nested: set[_NestedCall] = set()
        # The header of every frame of this call up to its sequence.
        self._head = (_pack("t") + _pack("frame") + _pack("call_id") + _pack(inv.call_id) + _pack("direction")
                      + _pack(PROVIDER_TO_CALLER) + _K_SEQUENCE)
        inv._stream = self

    def start(self) -> None:
        loop = self.rt.loop
        self.rt.register(self)
        if self.inv.timeout_ms:
            delay = min(self.inv.timeout_ms / 1000.0, _FOREVER)
            self.deadline = loop.time() + delay
            self._timers.append(loop.call_at(self.deadline, self.cancel, Cause.TIMEOUT))
        self.task = loop.create_task(self.rt.dispatch(self.rt.startup, self.inv, self.tool))
        # A task cancelled before its first step never runs its body, so
        # the end of the handler is taken from the task's own end.
        self.task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: dispatch raised", self._ids(), exc_info=task.exception())
        if not self.returned:
            self._returned()

    async def flush(self) -> None:
        try:
            await self.conn.flush()
        except ConnectionClosed:
            pass
        except asyncio.CancelledError:
            if self.cause is not None:
                raise cancelled_error(self.cause) from None
            raise
        if self.cause is not None:
            raise cancelled_error(self.cause)

    def start_call(self, tool: str, arguments: Optional[JsonObject], detached: bool,
                   timeout: Optional[float], whole: Optional[list[JsonObject]] = None
                   ) -> Coroutine[Any, Any, NestedCall]:
        """A call through the host as a step of this call (what awaiting
        ``inv.call(...)`` runs; see StreamInvoke.call)."""
        return start_call(self.rt, self, tool, arguments, detached, timeout, whole)

    def cancel(self, cause: str, invalid: Optional[Exception] = None, from_task: bool = False) -> None:
        """Cancel the call for cause; the first cause wins."""
        if self.returned or self.cause is not None:
            return
        self.cause = cause
        self.invalid = invalid
        with self.rt.lock:
            if self.cancelled_at is None:  # the control thread may have set it
                self.cancelled_at = time.monotonic()
        self.input._cancel(cause)
        if not from_task and self.task is not None:
            self.task.cancel()
        grace = self.cancel_grace
        if grace <= 0:
            self.rt.loop.call_soon(self._grace_over)
        else:
            self._timers.append(self.rt.loop.call_later(min(grace, _FOREVER), self._grace_over))

    def _grace_over(self) -> None:
        # Stuck: the cause's terminal is written for the handler; its end
        # waits until it returns.
        if not self.returned:
            self.write_cause_terminal()

    def _send(self, f: StreamFrame) -> bool:
        try:
            head, att = encode_packet(f, self.conn.limits)
        except (ProtocolError, FieldError):
            return False
        self.fence.accept(f)
        self.conn.send_nowait(head, att)
        return True

    def _terminal_for_cause(self) -> Optional[StreamFrame]:
        seq, cid = self.fence.next_sequence, self.inv.call_id
        c = self.cause
        if c in (Cause.CALLER_CANCELLED, Cause.CANCEL_REQUESTED, Cause.DRAINED):
            return StreamFrame(cid, PROVIDER_TO_CALLER, seq, "cancelled")
        if c == Cause.TIMEOUT:
            return StreamFrame(cid, PROVIDER_TO_CALLER, seq, "failed", error=StreamError("timeout", "timeout_ms passed"))
        if c == Cause.INVALID_INPUT:
            msg = "invalid frame"
            if self.invalid is not None:
                msg = f"invalid frame: {self.invalid}"
            return StreamFrame(cid, PROVIDER_TO_CALLER, seq, "failed", error=StreamError("invalid_frame", sanitize_message(msg)))
        return None  # the connection or the host is gone: nothing can be written

    def write_cause_terminal(self) -> None:
        if self.terminal_sent or self.conn.closed or self.conn.broken:
            return
        f = self._terminal_for_cause()
        if f is not None and self._send(f):
            self.terminal_sent = True

    def _fail(self, code: str, message: str) -> None:
        if self.terminal_sent or self.cause is not None:
            return
        if code not in ERROR_CODES or code == "cancelled":
            code = "provider_error"
        f = StreamFrame(self.inv.call_id, PROVIDER_TO_CALLER, self.fence.next_sequence, "failed",
                        error=StreamError(code, sanitize_message(message)))  # type: ignore[arg-type]
        if self._send(f):
            self.terminal_sent = True

    async def end_nested(self) -> None:
        """Cancel the calls through the host the handler left open and
        wait for their ends, at most the cancel grace (docs/protocol.md §8
        item 6), before the call's own terminal is written."""
        if not self.nested:
            return
        calls = list(self.nested)
        for n in calls:
            n._cancel_nowait()
        try:
            await asyncio.wait([asyncio.shield(n.done) for n in calls], timeout=max(self.cancel_grace, 0.01))
        finally:
            for n in calls:
                if not n.done.done():
                    n._conn.close()
        await asyncio.wait([asyncio.shield(n.done) for n in calls])

    async def _end_nested_then_fail(self, code: str, message: str) -> None:
        await self._end_nested_quietly()
        self._fail(code, message)

    async def _end_nested_quietly(self) -> None:
        try:
            await self.end_nested()
        except asyncio.CancelledError:
            if self.cause is None:
                raise

    def _ids(self) -> str:
        """The call's ids as every log line about a call gives them, with
        the Go host's and SDK's keys (docs/operations.md, "Logs")."""
        return f"call_id={self.inv.call_id} tree_id={self.inv.tree or self.inv.call_id} tool={self.tool.id}"

    def _returned(self) -> None:
        self.returned = True
        for t in self._timers:
            t.cancel()
        self.rt.unregister(self)
        if not self.terminal_sent:
            if self.cause is not None:
                self.write_cause_terminal()
            else:
                self._fail("provider_error", "handler returned without a terminal")
        if self.terminal_sent and not self.conn.closed and not self.conn.broken:
            head, _ = encode_packet(StreamEnd(self.inv.call_id))
            self.conn.send_nowait(head)
        self.input._close()
        _wake(self.done)
        self.rt.changed()

    def _encode(self, f: StreamFrame) -> tuple[bytes, Any]:
        """The packet of a frame this call's fence admits (call id,
        direction and sequence checked): the header from the call's
        pre-packed start. Raises FieldError for a payload changed since it
        was checked into one msgpack cannot encode, HeaderLengthError or
        AttachmentLengthError over the limits."""
        payload = f.payload
        if f.media is None and f.error is None and payload is not None:
            # The common small frame: a payload and nothing else.
            try:
                hb = b"".join((b"\x86", self._head, _pack(f.sequence), _K_KIND[f.kind], _K_PAYLOAD, _pack(payload)))
            except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
                raise FieldError("payload", "has a value with no JSON form") from None
            if len(hb) > self.conn.limits.max_header:
                from .errors import HeaderLengthError

                raise HeaderLengthError(f"header of {len(hb)} bytes, limit {self.conn.limits.max_header}")
            return _prefix.pack(len(hb), 0) + hb, b""
        n = 5
        parts = [b"", self._head, _pack(f.sequence), _K_KIND[f.kind]]
        att: Any = b""
        try:
            if f.payload is not None:
                n += 1
                parts.append(_K_PAYLOAD)
                parts.append(_pack(f.payload))
            if f.media is not None:
                n += 1
                parts.append(_K_MEDIA)
                parts.append(_pack(_media_map(f.media)))
                if type(f.media) is InlineMedia:
                    att = f.media.data
            if f.error is not None:
                n += 1
                parts.append(_K_ERROR)
                parts.append(_pack({"code": f.error.code, "message": f.error.message}))
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
            raise FieldError("payload", "has a value with no JSON form") from None
        parts[0] = bytes((0x80 | n,))
        hb = b"".join(parts)
        a = len(att) if type(att) is not memoryview else att.nbytes
        lim = self.conn.limits
        if len(hb) > lim.max_header:
            from .errors import HeaderLengthError

            raise HeaderLengthError(f"header of {len(hb)} bytes, limit {lim.max_header}")
        if a > lim.max_attachment:
            from .errors import AttachmentLengthError

            raise AttachmentLengthError(f"attachment of {a} bytes, limit {lim.max_attachment}")
        return _prefix.pack(len(hb), a) + hb, att

    async def drive(self, handler: StreamHandler) -> None:
        """Run handler to its end, writing what it yields."""
        try:
            agen = handler(self.inv, self.input)
        except Exception as e:
            log.error("%s: handler raised", self._ids(), exc_info=True)
            await self._end_nested_then_fail("provider_error", "handler raised " + type(e).__name__)
            return
        if not hasattr(agen, "__anext__") or not hasattr(agen, "athrow"):
            self._fail("provider_error", "handler is not an async generator")
            return
        checker = self.rt.checker(self.tool)
        throw: Optional[BaseException] = None
        conn = self.conn
        fc = self.fence
        anext = agen.__anext__
        while True:
            try:
                if throw is not None:
                    exc, throw = throw, None
                    item = await agen.athrow(exc)
                else:
                    item = await anext()
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if self.cause is None:
                    raise
                return
            except AfterTerminalError:
                if self.terminal_sent:
                    return
                raise
            except SchemaError:
                if self.terminal_sent:
                    return
                raise
            except ToolError as e:
                await self._end_nested_then_fail(e.code, e.message)
                return
            except Exception as e:
                log.error("%s: handler raised", self._ids(), exc_info=True)
                await self._end_nested_then_fail("provider_error", "handler raised " + type(e).__name__)
                return
            if self.cause is not None:
                throw = cancelled_error(self.cause)
                continue
            if self.terminal_sent:
                throw = AfterTerminalError("the call's terminal was sent")
                continue
            if type(item) is not StreamFrame:
                throw = TypeError("a handler yields StreamFrame values (call.chunk, call.completed, call.failed)")
                continue
            if item.call_id != fc.call_id or item.direction != PROVIDER_TO_CALLER or item.sequence != fc.next_sequence or item.kind == "started":
                try:
                    Sequence(fc.call_id, PROVIDER_TO_CALLER, next_sequence=fc.next_sequence).accept(item)
                    throw = FieldError("kind", "the host owns the provider's started")
                except SequenceError as e:
                    throw = e
                continue
            kind = item.kind
            terminal = kind != "chunk"
            if checker is not None and item.payload is not None:
                try:
                    if kind == "chunk":
                        checker.check_output(item.payload)
                    elif kind == "completed":
                        checker.check_result(item.payload)
                except SchemaError as e:
                    log.warning("%s: %s", self._ids(), e)
                    self._fail("invalid_frame", str(e))
                    throw = e
                    continue
            try:
                head, att = self._encode(item)
            except FieldError as e:
                throw = e
                continue
            except ProtocolError as e:
                if terminal:
                    self._fail("provider_error", "handler result could not be sent")
                    await _aclose(agen)
                    return
                throw = e
                continue
            if terminal and self.nested:
                await self._end_nested_quietly()
                if self.cause is not None:
                    throw = cancelled_error(self.cause)
                    continue
            fc.next_sequence += 1
            if terminal:
                fc.closed = True
                self.terminal_sent = True
            if not att and conn.send_small(head):
                continue
            try:
                await conn.write(head, att)
            except ConnectionClosed:
                self.cancel(Cause.CONN_CLOSED, from_task=True)
                throw = cancelled_error(Cause.CONN_CLOSED)
            except asyncio.CancelledError:
                if self.cause is None:
                    raise
                await _aclose(agen)
                return


async def execute_stream(startup: Startup, call: StreamInvoke, handler: StreamHandler) -> None:
    """Serve one admitted stream while the child's main loop answers
    health: run handler(call, frames) to its end, write what it yields,
    then the call's end.

    ``serve`` calls it in the call's owned task (through its ``dispatch``,
    which may wrap it); ``call`` is the StreamInvoke serve admitted on a
    stream connection. The handler receives the caller's chunks (a
    completed is a half-close); its output starts at sequence 1 (the host
    owns the provider's started) with exactly one terminal. Disconnect,
    invalid input, a control cancel or the deadline cancels it: the
    handler sees CallCancelledError (CallTimeoutError for the deadline)
    from its input, its ``call.flush()`` or thrown at its ``yield``, or
    asyncio.CancelledError at another ``await``, and the SDK writes the
    cause's terminal. Raises FieldError ``call`` for an invoke serve did
    not admit, or one served already; ``tools.handler`` for a handler
    that is not an async generator function."""
    st = call._stream
    if not isinstance(st, _Call):
        raise FieldError("call", "not admitted on a stream connection")
    if st.served:
        raise FieldError("call", "already served")
    if not _is_async_gen_function(handler):
        raise FieldError("tools.handler", "not an async generator function (async def with yield)")
    st.served = True
    st.cancel_grace = startup.cancel_grace_ms / 1000.0
    try:
        await st.drive(handler)
    except asyncio.CancelledError:
        if st.cause is None:
            raise
    finally:
        if not st.returned:
            if st.nested:
                try:
                    await st.end_nested()
                except asyncio.CancelledError:
                    pass
            st._returned()


async def _aclose(agen: AsyncGenerator[StreamFrame, None]) -> None:
    try:
        await agen.aclose()
    except BaseException:
        pass


class _Close(Exception):
    """Ends a connection's reader: the connection is closed."""


#: What serve runs in a call's owned task: ``dispatch(startup, call,
#: tool)``; the default awaits ``execute_stream(startup, call,
#: tool.handler)``.
Dispatch = Callable[[Startup, StreamInvoke, Tool], Coroutine[Any, Any, None]]


async def _default_dispatch(startup: Startup, call: StreamInvoke, tool: Tool) -> None:
    await execute_stream(startup, call, tool.handler)


class _Runtime:
    """One child: its calls, its connections and its control thread.
    Owned by the event loop, except what the control thread reads and
    writes under ``lock`` (the call registry) and ``ctl_lock`` (control
    writes)."""

    def __init__(self, tools: Seq[Tool], startup: Startup, limits: Limits, control: Optional[socket.socket],
                 listener: Optional[socket.socket], dispatch: Dispatch = _default_dispatch,
                 check_output: bool = False, hard_exit: bool = False) -> None:
        self.tools = {t.id: t for t in tools}
        self.startup = startup
        self.limits = limits
        self.cancel_grace = startup.cancel_grace_ms / 1000.0
        self.control = control
        self.listener = listener
        self.dispatch = dispatch
        self.check_output = check_output
        self.hard_exit = hard_exit
        self._checkers: dict[str, Optional[OutputChecker]] = {}
        # What the host offers to call through it; None: nothing.
        self.offer = _Offer(startup.calls) if startup.calls is not None else None
        # The reader tasks of the calls through the host not ended (at
        # most calls.max_in_flight).
        self.nested_tasks: set[asyncio.Task[None]] = set()
        self.loop = asyncio.get_running_loop()
        self.lock = threading.Lock()
        self.ctl_lock = threading.Lock()
        self._bye_sent = False  # under ctl_lock
        self.active: set[_Call] = set()  # calls whose handler has not returned; under lock
        self.by_id: dict[str, _Call] = {}  # call id -> _Call, while the handler runs; written under lock
        self.remembered: OrderedDict[str, bool] = OrderedDict()
        self.draining = False
        # Set by the control thread as it reads drain, before it answers
        # the next ping: invokes read after that pong are refused even if
        # the loop has not run on_drain yet.
        self.drain_read = False
        self.all_returned = threading.Event()
        self.all_returned.set()
        self.conns: set[asyncio.Task[None]] = set()  # reader tasks of the stream connections
        self.open_conns: set[Conn] = set()  # their connections
        self._accept_task: Optional[asyncio.Task[None]] = None
        self._changed = asyncio.Event()
        self._grace_at: Optional[float] = None
        self._grace_timer: Optional[asyncio.TimerHandle] = None
        self._limit: Optional[float] = None
        self._drain_task: Optional[asyncio.Task[None]] = None
        self._stopped: asyncio.Future[int] = self.loop.create_future()
        self._stop_task: Optional[asyncio.Task[None]] = None
        # Set once serve has finished: the control thread then ends
        # quietly, and under main() it no longer needs to end the process.
        self.finished = threading.Event()

    def checker(self, tool: Tool) -> Optional[OutputChecker]:
        """The tool's compiled output checks, or None when off or when it
        declares neither schema."""
        if not self.check_output or (tool.output_schema is None and tool.result_schema is None):
            return None
        c = self._checkers.get(tool.id)
        if c is None:
            c = self._checkers[tool.id] = OutputChecker(tool.output_schema, tool.result_schema)
        return c

    # ---------- shared with the control thread ----------

    def register(self, c: _Call) -> None:
        with self.lock:
            self.active.add(c)
            self.all_returned.clear()
            self.by_id[c.inv.call_id] = c

    def unregister(self, c: _Call) -> None:
        with self.lock:
            self.active.discard(c)
            if not self.active:
                self.all_returned.set()
            if self.by_id.get(c.inv.call_id) is c:
                del self.by_id[c.inv.call_id]

    def mark_cancelled(self, call_id: str) -> None:
        """From the control thread, when a cancel arrives: the call's
        cancel_grace_ms counts from now even while a handler blocks the
        loop, so pong.stuck reports it; the loop cancels it when it can."""
        with self.lock:
            c = self.by_id.get(call_id)
            if c is not None and c.cancelled_at is None:
                c.cancelled_at = time.monotonic()

    def counters(self) -> tuple[int, int]:
        now = time.monotonic()
        g = self.cancel_grace
        with self.lock:
            streams = len(self.active)
            stuck = sum(1 for c in self.active if c.cancelled_at is not None and now - c.cancelled_at >= g)
        return streams, stuck

    def bye_once(self) -> None:
        """Write bye, once: the loop's drain and the control thread's
        backstop may both reach the drain's bound."""
        head, _ = encode_packet(Bye("drained"), self.limits)
        with self.ctl_lock:
            if self._bye_sent or self.control is None:
                return
            self._bye_sent = True
            try:
                self.control.sendall(head)
            except OSError:
                pass

    def ctl_write(self, p: Packet) -> None:
        head, _ = encode_packet(p, self.limits)
        with self.ctl_lock:
            if self.control is not None:
                self.control.sendall(head)

    # ---------- the event loop ----------

    def changed(self) -> None:
        self._changed.set()

    def stop(self, status: int) -> None:
        """End serve with status: every call is cancelled (the host is
        gone, or the drain is over) and given HOST_GONE_GRACE to return."""
        if self._stop_task is None and not self._stopped.done():
            self._stop_task = self.loop.create_task(self._stop(status))

    async def _stop(self, status: int) -> None:
        self.cancel_all(Cause.HOST_GONE)
        end = self.loop.time() + HOST_GONE_GRACE
        while self.active:
            left = end - self.loop.time()
            if left <= 0:
                break
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        if not self._stopped.done():
            self._stopped.set_result(status)

    async def serve(self, rest: bytes) -> int:
        assert self.listener is not None and self.control is not None
        self.listener.setblocking(False)
        self._accept_task = self.loop.create_task(self._accept())
        ctl = threading.Thread(target=self._control_thread, args=(rest,), name="skulk-control", daemon=True)
        ctl.start()
        try:
            return await self._stopped
        finally:
            await self._shutdown()
            self.finished.set()
            try:
                self.control.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            ctl.join(1.0)
            self.control.close()

    async def _shutdown(self) -> None:
        """Stop accepting, close every connection and wait for their
        readers and the calls' tasks (bounded: a handler that ignores its
        cancellation is left behind)."""
        if self._accept_task is not None:
            self._accept_task.cancel()
        if self._drain_task is not None:
            self._drain_task.cancel()
        if self._stop_task is not None:
            self._stop_task.cancel()
        if self.listener is not None:
            try:
                self.listener.close()
            except OSError:
                pass
        self.cancel_all(Cause.HOST_GONE)
        for c in list(self.open_conns):
            c.close()
        if self.offer is not None:
            self.offer.close_idle()
            for n in list(self.offer.open):
                if isinstance(n, _NestedCall):
                    n._conn.close()
        tasks: list[asyncio.Task[Any]] = [t for t in self.conns if not t.done()]
        tasks += [t for t in self.nested_tasks if not t.done()]
        tasks += [c.task for c in list(self.active) if c.task is not None and not c.task.done()]
        for t in (self._accept_task, self._drain_task, self._stop_task):
            if t is not None and not t.done():
                tasks.append(t)
        if tasks:
            await asyncio.wait(tasks, timeout=HOST_GONE_GRACE)
        for g in (self._grace_timer,):
            if g is not None:
                g.cancel()

    async def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                s, _ = await self.loop.sock_accept(self.listener)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                if self.draining:
                    return
                log.warning("accept: %s", e.strerror)
                await asyncio.sleep(0.05)
                continue
            self.add_conn(s)

    def add_conn(self, s: socket.socket) -> Conn:
        """Serve a stream connection: read its invokes and frames in a
        reader task of its own."""
        conn = Conn(s, self.loop, self.limits)
        t = self.loop.create_task(self._serve_conn(conn))
        self.conns.add(t)
        t.add_done_callback(self.conns.discard)
        return conn

    def on_cancel(self, call_id: str) -> None:
        c = self.by_id.get(call_id)
        if c is not None:
            c.cancel(Cause.CANCEL_REQUESTED)
            return
        self.remembered[call_id] = True
        self.remembered.move_to_end(call_id)
        while len(self.remembered) > REMEMBERED_CANCELS:
            self.remembered.popitem(last=False)

    def cancel_all(self, cause: str) -> None:
        for c in list(self.by_id.values()):
            c.cancel(cause)
        for c in list(self.active):
            c.cancel(cause)

    def on_drain(self, grace_ms: int) -> None:
        now = self.loop.time()
        grace = min(grace_ms / 1000.0, _FOREVER)
        grace_at = now + grace
        limit = grace_at + min(self.cancel_grace, _FOREVER)
        if not self.draining:
            self.draining = True
            if self._accept_task is not None:
                self._accept_task.cancel()
            if self.listener is not None:
                try:
                    self.listener.close()
                except OSError:
                    pass
        if self._grace_at is None or grace_at < self._grace_at:
            self._grace_at = grace_at
            if self._grace_timer is not None:
                self._grace_timer.cancel()
            self._grace_timer = self.loop.call_at(grace_at, self.cancel_all, Cause.DRAINED)
        if self._limit is None or limit < self._limit:
            self._limit = limit
        if self._drain_task is None:
            self._drain_task = self.loop.create_task(self._drain())
        self.changed()

    async def _drain(self) -> None:
        # bye after the last end, and no later than grace_ms +
        # cancel_grace_ms (decision 26): at the limit minus a margin the
        # terminals of handlers still running are written, flushed for at
        # most four fifths of the margin, then bye.
        loop = self.loop
        assert self._limit is not None
        while True:
            margin = min(0.1, self.cancel_grace / 2)
            final = self._limit - margin
            if not self.active:
                break
            left = final - loop.time()
            if left <= 0:
                break
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        timed_out = bool(self.active)
        if timed_out:
            for c in list(self.active):
                if c.conn.pending() == 0:
                    c.write_cause_terminal()
        margin = min(0.1, self.cancel_grace / 2)
        flush_until = max(self._limit - margin / 5, loop.time() + 0.02) if timed_out else self._limit - margin / 5
        await self._flush_all(flush_until)
        self.bye_once()
        if not self._stopped.done():
            self._stopped.set_result(0)

    async def _flush_all(self, until: float) -> None:
        pending = [c for c in self.open_conns if c.pending() and not c.closed and not c.broken]
        if not pending:
            return
        left = until - self.loop.time()
        if left <= 0:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*(c.flush() for c in pending), return_exceptions=True), left)
        except asyncio.TimeoutError:
            pass

    async def _serve_conn(self, conn: Conn) -> None:
        self.open_conns.add(conn)
        call: Optional[_Call] = None
        try:
            prev_id = None
            pending: Optional[Packet] = None
            while True:
                if pending is None:
                    try:
                        pkt = await conn.read_packet()
                    except (ConnectionClosed, ProtocolError, OSError):
                        return
                    except InvalidPacketError as e:
                        if e.packet_type == "invoke" and e.call_id is not None:
                            self._quick(conn, e.call_id, "failed", "invalid_frame", "invalid invoke: " + str(e.error))
                            await self._flush_close(conn)
                        return
                else:
                    pkt, pending = pending, None
                if type(pkt) is not StreamInvoke:
                    return
                inv = pkt
                cid = inv.call_id
                if cid == prev_id or cid in self.by_id:
                    return
                prev_id = cid
                call = None
                tool = self.tools.get(inv.tool_id)
                if self.draining or self.drain_read:
                    self._quick(conn, cid, "failed", "unreachable", "draining")
                elif cid in self.remembered:
                    del self.remembered[cid]
                    self._quick(conn, cid, "cancelled", None, "")
                elif tool is None:
                    self._quick(conn, cid, "failed", "invalid_frame", "unknown tool")
                else:
                    call = _Call(self, conn, inv, tool)
                    call.start()
                pending = await self._read_caller(conn, Sequence(cid, "caller_to_provider"), call)
                call = None
        except _Close:
            pass
        finally:
            if call is not None and not call.returned:
                call.cancel(Cause.CONN_CLOSED)
            conn.close()
            self.open_conns.discard(conn)

    def _quick(self, conn: Conn, cid: str, kind: str, code: Optional[str], message: str) -> None:
        err = StreamError(code, message) if code else None  # type: ignore[arg-type]
        head, _ = encode_packet(StreamFrame(cid, PROVIDER_TO_CALLER, 1, kind, error=err), conn.limits)  # type: ignore[arg-type]
        conn.send_nowait(head)
        head, _ = encode_packet(StreamEnd(cid), conn.limits)
        conn.send_nowait(head)

    async def _flush_close(self, conn: Conn) -> None:
        try:
            await asyncio.wait_for(conn.flush(), CLOSE_FLUSH)
        except (asyncio.TimeoutError, ConnectionClosed):
            pass

    async def _invalid(self, conn: Conn, call: _Call, err: Exception) -> None:
        """An invalid caller frame: failed invalid_frame, end once the
        handler returned, then the connection closes."""
        call.cancel(Cause.INVALID_INPUT, err)
        await call.done
        await self._flush_close(conn)
        raise _Close

    async def _read_caller(self, conn: Conn, fence: Sequence, call: Optional[_Call]) -> Optional[Packet]:
        """Read caller frames until the caller's terminal (and, when the
        handler is still running then, until its end): the next packet of
        the connection, or None to read it afresh."""
        while True:
            try:
                pkt = await conn.read_packet()
            except (ConnectionClosed, ProtocolError, OSError):
                if call is not None:
                    call.cancel(Cause.CONN_CLOSED)
                raise _Close from None
            except InvalidPacketError as e:
                if e.packet_type == "frame" and call is not None and not call.returned and not fence.closed:
                    await self._invalid(conn, call, e.error)
                if call is not None:
                    call.cancel(Cause.CONN_CLOSED)
                raise _Close from None
            ended = call is None or call.returned
            if fence.closed:
                if ended:
                    return pkt
                assert call is not None
                call.cancel(Cause.CONN_CLOSED)  # a packet in the quiet interval
                raise _Close
            if type(pkt) is not StreamFrame:
                if call is not None:
                    call.cancel(Cause.CONN_CLOSED)
                raise _Close
            try:
                fence.accept(pkt)
            except SequenceError as e:
                if not ended:
                    assert call is not None
                    await self._invalid(conn, call, e)
                raise _Close from None
            if ended:
                if fence.closed:
                    return None
                continue
            assert call is not None
            kind = pkt.kind
            if kind == "chunk":
                await call.input._put(pkt)
            elif kind == "completed":
                call.input._end(pkt.payload)
            elif kind != "started":
                call.cancel(Cause.CALLER_CANCELLED)
            if fence.closed and call.returned:
                return None

    # ---------- the control thread ----------

    def _control_thread(self, rest: bytes) -> None:
        sock = self.control
        assert sock is not None
        buf = bytearray(rest)
        deadline: Optional[float] = None  # a drain's backstop, monotonic
        status = 0
        try:
            while True:
                while True:
                    if len(buf) >= PREFIX_LEN:
                        h, a = struct.unpack_from(">II", buf)
                        try:
                            check_lengths(h, a, self.limits)
                        except ProtocolError as e:
                            raise _CtlError(str(e)) from None
                        if a:
                            # No control packet has an attachment: refused
                            # at the prefix, so the buffer holds a header.
                            raise _CtlError("attachment on a control packet")
                        if len(buf) >= PREFIX_LEN + h:
                            break
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            # The event loop did not end the drain in time
                            # (a handler blocks it): bye from here.
                            if not self.finished.is_set():
                                log.warning("drain: the event loop did not answer in time; abandoning handlers")
                            self.bye_once()
                            raise ConnectionClosed
                        sock.settimeout(left)
                    try:
                        chunk = sock.recv(65536)
                    except socket.timeout:
                        continue
                    if not chunk:
                        raise ConnectionClosed
                    buf += chunk
                h, _ = struct.unpack_from(">II", buf)
                hb = bytes(buf[PREFIX_LEN : PREFIX_LEN + h])
                del buf[: PREFIX_LEN + h]
                try:
                    p = decode_header(hb, 0)
                except (ProtocolError, InvalidPacketError) as e:
                    raise _CtlError(str(e)) from None
                t = type(p)
                if t is Ping:
                    assert isinstance(p, Ping)
                    streams, stuck = self.counters()
                    self.ctl_write(Pong(p.nonce, streams, stuck))
                elif t is Cancel:
                    assert isinstance(p, Cancel)
                    self.mark_cancelled(p.call_id)
                    self._post(self.on_cancel, p.call_id)
                elif t is Drain:
                    assert isinstance(p, Drain)
                    self.drain_read = True
                    grace_s = (p.grace_ms + self.startup.cancel_grace_ms) / 1000.0
                    # bye is due grace_ms + cancel_grace_ms after the
                    # drain (§5): the loop's own drain writes it by then;
                    # this backstop, for a loop a handler blocks, comes
                    # 50 ms later so that it never cuts the loop's flush
                    # of terminals short.
                    d = time.monotonic() + min(grace_s, _FOREVER) + 0.05
                    deadline = d if deadline is None else min(deadline, d)
                    self._post(self.on_drain, p.grace_ms)
                else:
                    raise _CtlError(f"unexpected {t.__name__} on the control connection")
        except _CtlError as e:
            if not self.finished.is_set():
                log.error("protocol error on the control connection: %s", e)
            status = 1
        except (ConnectionClosed, OSError):
            pass
        if self.finished.is_set():
            return
        # The host is gone (or broke the protocol): the loop cancels every
        # handler and ends serve.
        self._post(self.stop, status)
        if self.hard_exit and not self.finished.wait(HARD_EXIT_AFTER):
            # Under main() only: the event loop is blocked (a handler that
            # never awaits); the process ends from here.
            log.error("the event loop did not end in time; exiting")
            for h in logging.getLogger().handlers + log.handlers:
                try:
                    h.flush()
                except Exception:
                    pass
            os._exit(status)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass


class _CtlError(Exception):
    """A control protocol error seen by the control thread."""


def _take_fds() -> tuple[socket.socket, socket.socket]:
    env = os.environ
    if env.get("SKULK_PROTOCOL") != "1":
        raise StartError("must be started by skulk-host: SKULK_PROTOCOL is not 1")
    try:
        cfd = int(env["SKULK_CONTROL_FD"])
        sfd = int(env["SKULK_STREAMS_FD"])
    except (KeyError, ValueError):
        raise StartError("must be started by skulk-host: SKULK_CONTROL_FD or SKULK_STREAMS_FD is not set") from None
    try:
        control = socket.socket(fileno=cfd)
        listener = socket.socket(fileno=sfd)
    except OSError as e:
        raise StartError(f"must be started by skulk-host: fds 3 and 4 are not sockets ({e.strerror})") from None
    if control.type != socket.SOCK_STREAM or listener.type != socket.SOCK_STREAM:
        raise StartError("fd 3 and fd 4 must be stream sockets")
    if not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        raise StartError("fd 4 must be a listening socket")
    control.set_inheritable(False)
    listener.set_inheritable(False)
    return control, listener


def _since_start() -> float:
    """Seconds since this process started (from /proc; 0 when it cannot
    be read): startup's 10 s count from the child's start, not from the
    end of its imports."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


def _handshake(control: socket.socket, tools: Seq[Tool], sdk: str, max_streams: int, own: Limits) -> tuple[Startup, bytes]:
    """hello, then the host's startup (blocking, at most STARTUP_TIMEOUT):
    the startup and any bytes read behind it."""
    t0 = time.monotonic() - _since_start()
    hello = Hello([1], sdk, os.getpid(), max_streams, own, [t.descriptor() for t in tools])
    head, _ = encode_packet(hello, Limits(1 << 20))
    h = a = 0
    try:
        control.settimeout(STARTUP_TIMEOUT)
        control.sendall(head)
        buf = bytearray()
        while True:
            if len(buf) >= PREFIX_LEN:
                h, a = struct.unpack_from(">II", buf)
                try:
                    check_lengths(h, a, own)
                except ProtocolError:
                    raise StartError("startup unreadable: a length over the limits") from None
                if a:
                    raise StartError("startup unreadable: an attachment on a control packet")
                if len(buf) >= PREFIX_LEN + h + a:
                    break
            left = STARTUP_TIMEOUT - (time.monotonic() - t0)
            if left <= 0:
                raise socket.timeout
            control.settimeout(left)
            chunk = control.recv(65536)
            if not chunk:
                raise StartError("the host closed the control connection before startup")
            buf += chunk
    except socket.timeout:
        raise StartError(f"no startup within {STARTUP_TIMEOUT:.0f} s") from None
    except OSError as e:
        raise StartError(f"control connection: {e.strerror}") from None
    control.settimeout(None)
    try:
        p = decode_header(bytes(buf[PREFIX_LEN : PREFIX_LEN + h]), a)
    except (ProtocolError, InvalidPacketError):
        raise StartError("the first control packet is not a readable startup") from None
    if type(p) is not Startup:
        raise StartError("the first control packet is not startup")
    if p.protocol != 1:
        raise StartError("startup chose a protocol version this child did not offer")
    return p, bytes(buf[PREFIX_LEN + h + a :])


def _check_tools(tools: Seq[Tool]) -> None:
    ids = set()
    for t in tools:
        if not isinstance(t, Tool):
            raise FieldError("tools", "not a Tool")
        if t.id in ids:
            raise FieldError("tools.id", "given twice")
        ids.add(t.id)


async def serve(
    tools: Seq[Tool],
    *,
    sdk: str = SDK,
    max_streams: int = 4096,
    limits: Optional[Limits] = None,
    check_output: bool = False,
    dispatch: Optional[Dispatch] = None,
    _hard_exit: bool = False,
) -> int:
    """Serve tools as a Skulk child in the running event loop until the
    host drains it or goes away; return the exit status the process
    should end with: 0 when drained or when the host is gone, 1 when the
    host broke the protocol on the control connection.

    The process must have been started by a Skulk host (fds 3 and 4);
    other work may share the loop (a handler that blocks the loop still
    never delays a pong: pongs come from a thread of serve's own).
    ``check_output`` checks each payload against the tool's
    output_schema / result_schema in the SDK too (needs jsonschema; the
    host checks anyway). ``dispatch(startup, call, tool)`` runs in each
    call's owned task; the default awaits ``execute_stream(startup, call,
    tool.handler)``, and a dispatch of your own wraps that call (a
    contextvar, a span, a semaphore around it).

    Raises FieldError for a tool id given twice (``tools.id``) or a list
    holding something else than Tools, and StartError when the start
    fails (not started by a host; startup missing, late or unreadable),
    before anything is served. Changes no process-wide setting."""
    _check_tools(tools)
    if check_output:
        for t in tools:
            OutputChecker(t.output_schema, t.result_schema)  # ImportError without jsonschema; a bad schema
    control, listener = _take_fds()
    own = (limits or Limits()).effective()
    try:
        startup, rest = await asyncio.to_thread(_handshake, control, tools, sdk, max_streams, own)
    except BaseException:
        control.close()
        listener.close()
        raise
    eff = own.min(startup.limits)
    rt = _Runtime(tools, startup, eff, control, listener, dispatch or _default_dispatch, check_output, _hard_exit)
    return await rt.serve(rest)


def main(
    tools: Seq[Tool],
    *,
    sdk: str = SDK,
    max_streams: int = 4096,
    limits: Optional[Limits] = None,
    check_output: bool = False,
    switch_interval: Optional[float] = None,
) -> None:
    """Serve tools as a Skulk child in an event loop of its own (``serve``
    in a new loop), and return when the host drains the child or goes
    away. Raises SystemExit(1) when the host broke the protocol on the
    control connection, and SystemExit(2) with the reason logged (one line
    on stderr) when the start fails; FieldError for a tool list serve
    refuses.

    ``switch_interval`` (seconds) sets sys.setswitchinterval when given: a
    small one (0.001) bounds how long CPU-bound Python in a handler
    delays a pong. Nothing else process-wide is changed. Should the event
    loop be blocked by a handler when the host is gone (or a drain's bound
    passes), the process is ended from the control thread 0.3 s later, as
    the host expects of a child."""
    _check_tools(tools)
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    loop = asyncio.new_event_loop()
    status = 0
    try:
        status = loop.run_until_complete(serve(tools, sdk=sdk, max_streams=max_streams, limits=limits,
                                               check_output=check_output, _hard_exit=True))
    except StartError as e:
        cid = os.environ.get("SKULK_CHILD_ID", "")
        log.error("skulk child%s: %s", " " + cid if cid else "", e)
        status = 2
    except KeyboardInterrupt:
        pass
    finally:
        _close_loop(loop)
    if status:
        raise SystemExit(status)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on loop, give it HOST_GONE_GRACE, and close it;
    a task that ignores its cancellation is abandoned without a
    warning."""
    loop.set_exception_handler(lambda _loop, _ctx: None)
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=HOST_GONE_GRACE))
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), HOST_GONE_GRACE))
    except (asyncio.TimeoutError, RuntimeError):
        pass
    finally:
        loop.close()
