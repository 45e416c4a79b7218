"""The child runtime: turns a list of tools into a conforming Skulk child
(docs/protocol.md §1, §5, §6; docs/provider.md "In another language").

Threads and tasks:

* The **control thread** owns the control connection (fd 3). It reads
  every control packet and answers ``ping`` itself, computing ``pong``'s
  counters from a registry shared under a lock, so a handler that blocks
  the event loop (``time.sleep``, CPU work) delays its own and other
  streams but never a pong. It hands ``cancel`` and ``drain`` to the event
  loop, and on control EOF it cancels every handler and exits the process
  within 100 ms, whatever the loop is doing.
* The **event loop** (the main thread) accepts stream connections (fd 4)
  and runs one reader task per connection and one owned task per call,
  which drives the tool's async-generator handler. Caller frames are
  checked (shape, fence) and queued for the handler in a queue of 8;
  while it is full the reader stops reading, which is the backpressure.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import socket
import struct
import sys
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional

from . import __version__
from ._conn import Conn
from .frames import (
    CALLER_TO_PROVIDER,
    PROVIDER_TO_CALLER,
    FieldError,
    StreamEnd,
    StreamError,
    StreamFrame,
    sanitize_message,
)
from .sequence import Sequence, SequenceError
from .wire import (
    INGRESS_QUEUE,
    PREFIX_LEN,
    Bye,
    Cancel,
    ConnectionClosed,
    Drain,
    Hello,
    InvalidPacketError,
    Limits,
    PacketCutShort,
    Ping,
    Pong,
    ProtocolError,
    Startup,
    StreamInvoke,
    ToolDescriptor,
    _pack,
    check_lengths,
    decode_header,
    encode_packet,
    tool_map,
)

__all__ = ["Tool", "Cause", "ToolError", "Terminated", "CallCancelled", "Input", "main", "SDK"]

SDK = "skulk-python/" + __version__

#: Startup must arrive within this many seconds of the child's start (§5).
STARTUP_TIMEOUT = 10.0
#: A host gone: cancelled handlers get this long to return before exit.
HOST_GONE_GRACE = 0.1
#: The most unknown-call cancels remembered (§6 "Call ids").
REMEMBERED_CANCELS = 1024
#: Seconds a closing connection may take to flush an invalid frame's answer.
CLOSE_FLUSH = 5.0
#: The longest delay a timer is given: about 146 years (decision 49).
_FOREVER = 146 * 365 * 86400.0


class Cause:
    """Why a call was cancelled (``call.cause`` in a handler)."""

    CALLER_CANCELLED = "caller_cancelled"  #: the caller's cancelled or failed
    CANCEL_REQUESTED = "cancel_requested"  #: a control cancel
    TIMEOUT = "timeout"  #: the invoke's timeout_ms passed
    INVALID_INPUT = "invalid_input"  #: a caller frame broke the rules
    CONN_CLOSED = "conn_closed"  #: the stream connection closed
    DRAINED = "drained"  #: a drain past its grace
    HOST_GONE = "host_gone"  #: the control connection ended


class ToolError(Exception):
    """Raise from a handler to fail the call with this code and message
    (sanitized; never put secrets in it). Any other exception fails the
    call with provider_error "handler raised <type>", its traceback going
    to stderr only."""

    def __init__(self, message: str, code: str = "provider_error") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Terminated(Exception):
    """Thrown into a handler that yields after its terminal was sent: the
    frame is refused and never sent."""


class CallCancelled(asyncio.CancelledError):
    """Thrown into a handler that yields after its call was cancelled, and
    raised by its input: ``cause`` is a Cause."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


Handler = Callable[[StreamInvoke, "Input"], Any]


@dataclass
class Tool:
    """A tool: its descriptor and an async-generator handler
    ``handler(call: StreamInvoke, frames: Input)`` that yields the call's
    provider frames (built with ``call.chunk``, ``call.completed``,
    ``call.failed``), exactly one terminal among them."""

    id: str
    handler: Handler
    description: str = ""
    arguments_schema: Optional[dict] = None
    input_schema: Optional[dict] = None
    output_schema: Optional[dict] = None
    result_schema: Optional[dict] = None
    version: str = ""

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


_source_hashes: dict = {}


def _derive_version(d: ToolDescriptor, handler: Any) -> str:
    h = hashlib.sha256(_pack(tool_map(d)))
    h.update(SDK.encode())
    try:
        path = inspect.getsourcefile(handler)
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


class Input:
    """The caller's chunks, in order, through a queue of 8. Iteration ends
    when the caller completes its direction (a half-close; ``result`` is
    the payload of its completed, if any) and raises CallCancelled when
    the call is cancelled."""

    __slots__ = ("_q", "_waiter", "_put_waiter", "_done", "_cause", "_discard", "result")

    def __init__(self) -> None:
        from collections import deque

        self._q = deque()
        self._waiter: Optional[asyncio.Future] = None
        self._put_waiter: Optional[asyncio.Future] = None
        self._done = False
        self._cause: Optional[str] = None
        self._discard = False
        self.result: Optional[dict] = None

    def __aiter__(self) -> "Input":
        return self

    async def __anext__(self) -> StreamFrame:
        while True:
            if self._cause is not None:
                raise CallCancelled(self._cause)
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

    def _end(self, payload: Optional[dict]) -> None:
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


def _wake(fut: Optional[asyncio.Future]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _log(msg: str) -> None:
    try:
        sys.stderr.write(f"skulk child {os.environ.get('SKULK_CHILD_ID', '')}: {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


def _exit(code: int) -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


class _Call:
    """One call: its owned task, its fences and its cancellation."""

    def __init__(self, rt: "_Runtime", conn: Conn, inv: StreamInvoke, tool: Tool) -> None:
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
        self.done = rt.loop.create_future()
        self.task: Optional[asyncio.Task] = None
        self.deadline: Optional[float] = None
        self._timers: list = []
        inv._runtime = self

    def start(self) -> None:
        loop = self.rt.loop
        self.rt.register(self)
        if self.inv.timeout_ms:
            delay = min(self.inv.timeout_ms / 1000.0, _FOREVER)
            self.deadline = loop.time() + delay
            self._timers.append(loop.call_at(self.deadline, self.cancel, Cause.TIMEOUT))
        self.task = loop.create_task(self._run())
        # A task cancelled before its first step never runs its body, so
        # the end of the handler is taken from the task's own end.
        self.task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        if not self.returned:
            self._returned()

    async def flush(self) -> None:
        try:
            await self.conn.flush()
        except ConnectionClosed:
            pass

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
        grace = self.rt.cancel_grace
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
            if isinstance(self.invalid, FieldError):
                msg = f"invalid frame: {self.invalid}"
            elif self.invalid is not None:
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
        f = StreamFrame(self.inv.call_id, PROVIDER_TO_CALLER, self.fence.next_sequence, "failed", error=StreamError(code, sanitize_message(message)))
        if self._send(f):
            self.terminal_sent = True

    def _ids(self) -> str:
        """The call's ids as every log line about a call gives them, with
        the Go host's and SDK's keys (docs/operations.md, "Logs")."""
        return f"call_id={self.inv.call_id} tree_id={self.inv.tree or self.inv.call_id}"

    async def _run(self) -> None:
        try:
            await self._drive()
        except asyncio.CancelledError:
            pass
        except Exception:
            _log(f"{self._ids()}: handler driver: " + traceback.format_exc())

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

    async def _drive(self) -> None:
        try:
            agen = self.tool.handler(self.inv, self.input)
        except Exception as e:
            _log(f"{self._ids()} tool={self.tool.id}: handler raised: " + traceback.format_exc())
            self._fail("provider_error", "handler raised " + type(e).__name__)
            return
        if not hasattr(agen, "__anext__"):
            self._fail("provider_error", "handler is not an async generator")
            return
        throw: Optional[BaseException] = None
        conn = self.conn
        try:
            while True:
                try:
                    if throw is not None:
                        exc, throw = throw, None
                        item = await agen.athrow(exc)
                    else:
                        item = await agen.__anext__()
                except StopAsyncIteration:
                    return
                except (Terminated, CallCancelled):
                    return
                except asyncio.CancelledError:
                    if self.cause is None:
                        raise
                    return
                except ToolError as e:
                    self._fail(e.code if e.code in ("provider_error", "transport_error", "unreachable", "timeout", "invalid_frame") else "provider_error", e.message)
                    return
                except Exception as e:
                    _log(f"{self._ids()} tool={self.tool.id}: handler raised: " + traceback.format_exc())
                    self._fail("provider_error", "handler raised " + type(e).__name__)
                    return
                if self.cause is not None:
                    throw = CallCancelled(self.cause)
                    continue
                if self.terminal_sent:
                    throw = Terminated("the call's terminal was sent")
                    continue
                if not isinstance(item, StreamFrame):
                    throw = TypeError("a handler yields StreamFrame values (call.chunk, call.completed, call.failed)")
                    continue
                fc = self.fence
                if item.call_id != fc.call_id or item.direction != PROVIDER_TO_CALLER or item.sequence != fc.next_sequence or fc.closed:
                    try:
                        Sequence(fc.call_id, PROVIDER_TO_CALLER, next_sequence=fc.next_sequence).accept(item)
                        throw = SequenceError("frame refused")
                    except SequenceError as e:
                        throw = e
                    continue
                try:
                    head, att = encode_packet(item, conn.limits)
                except FieldError as e:
                    throw = e
                    continue
                except ProtocolError as e:
                    if item.is_terminal():
                        self._fail("provider_error", "handler result could not be sent")
                        await _aclose(agen)
                        return
                    throw = e
                    continue
                fc.accept(item)
                if item.is_terminal():
                    self.terminal_sent = True
                try:
                    await conn.write(head, att)
                except ConnectionClosed:
                    self.cancel(Cause.CONN_CLOSED, from_task=True)
                    throw = CallCancelled(Cause.CONN_CLOSED)
                except asyncio.CancelledError:
                    if self.cause is None:
                        raise
                    await _aclose(agen)
                    return
        except BaseException:
            raise


async def _aclose(agen) -> None:
    try:
        await agen.aclose()
    except BaseException:
        pass


class _Close(Exception):
    """Ends a connection's reader: the connection is closed."""


class _Runtime:
    def __init__(self, tools: list, startup: Startup, limits: Limits, control: socket.socket, listener: socket.socket) -> None:
        self.tools = {t.id: t for t in tools}
        self.startup = startup
        self.limits = limits
        self.cancel_grace = startup.cancel_grace_ms / 1000.0
        self.control = control
        self.listener = listener
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore
        self.lock = threading.Lock()
        self.ctl_lock = threading.Lock()
        self._bye_sent = False  # under ctl_lock
        self.active: set = set()  # calls whose handler has not returned; under lock
        self.by_id: dict = {}  # call id -> _Call, while the handler runs; written under lock
        self.remembered: OrderedDict = OrderedDict()
        self.draining = False
        # Set by the control thread as it reads drain, before it answers
        # the next ping: invokes read after that pong are refused even if
        # the loop has not run on_drain yet.
        self.drain_read = False
        self.all_returned = threading.Event()
        self.all_returned.set()
        self.conns: set = set()  # reader tasks of the stream connections
        self.open_conns: set = set()  # their connections
        self._accept_task: Optional[asyncio.Task] = None
        self._changed: Optional[asyncio.Event] = None
        self._grace_at: Optional[float] = None
        self._grace_timer = None
        self._limit: Optional[float] = None
        self._drain_task: Optional[asyncio.Task] = None

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

    def counters(self) -> tuple:
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
            if self._bye_sent:
                return
            self._bye_sent = True
            try:
                self.control.sendall(head)
            except OSError:
                pass

    def ctl_write(self, p: Any) -> None:
        head, _ = encode_packet(p, self.limits)
        with self.ctl_lock:
            self.control.sendall(head)

    # ---------- the event loop ----------

    def changed(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self.listener.setblocking(False)
        self._accept_task = self.loop.create_task(self._accept())
        ctl = threading.Thread(target=self._control_thread, name="skulk-control", daemon=True)
        ctl.start()
        await asyncio.Event().wait()  # until the process exits

    async def _accept(self) -> None:
        while True:
            try:
                s, _ = await self.loop.sock_accept(self.listener)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                if self.draining:
                    return
                _log(f"accept: {e}")
                await asyncio.sleep(0.05)
                continue
            conn = Conn(s, self.loop, self.limits)
            t = self.loop.create_task(self._serve_conn(conn))
            self.conns.add(t)
            t.add_done_callback(self.conns.discard)

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

    def on_host_gone(self) -> None:
        self.cancel_all(Cause.HOST_GONE)

    def on_drain(self, grace_ms: int) -> None:
        now = self.loop.time()
        grace = min(grace_ms / 1000.0, _FOREVER)
        grace_at = now + grace
        limit = grace_at + min(self.cancel_grace, _FOREVER)
        if not self.draining:
            self.draining = True
            if self._accept_task is not None:
                self._accept_task.cancel()
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
        _exit(0)

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
            pending = None
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
                pending = await self._read_caller(conn, Sequence(cid, CALLER_TO_PROVIDER), call)
                call = None
        except _Close:
            pass
        finally:
            if call is not None and not call.returned:
                call.cancel(Cause.CONN_CLOSED)
            conn.close()
            self.open_conns.discard(conn)

    def _quick(self, conn: Conn, cid: str, kind: str, code: Optional[str], message: str) -> None:
        err = StreamError(code, message) if code else None
        head, _ = encode_packet(StreamFrame(cid, PROVIDER_TO_CALLER, 1, kind, error=err), conn.limits)
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

    async def _read_caller(self, conn: Conn, fence: Sequence, call: Optional[_Call]):
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
                    await self._invalid(conn, call, e)
                raise _Close from None
            if ended:
                if fence.closed:
                    return None
                continue
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

    def _control_thread(self) -> None:
        sock = self.control
        buf = bytearray()
        deadline: Optional[float] = None  # a drain's backstop, monotonic
        try:
            while True:
                while True:
                    if len(buf) >= PREFIX_LEN:
                        h, a = struct.unpack_from(">II", buf)
                        try:
                            check_lengths(h, a, self.limits)
                        except ProtocolError as e:
                            self._ctl_protocol_error(str(e))
                        if a:
                            # No control packet has an attachment: refused
                            # at the prefix, so the buffer holds a header.
                            self._ctl_protocol_error("attachment on a control packet")
                        if len(buf) >= PREFIX_LEN + h:
                            break
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            self._backstop_bye()
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
                    self._ctl_protocol_error(str(e))
                t = type(p)
                if t is Ping:
                    streams, stuck = self.counters()
                    self.ctl_write(Pong(p.nonce, streams, stuck))
                elif t is Cancel:
                    self.mark_cancelled(p.call_id)
                    self._post(self.on_cancel, p.call_id)
                elif t is Drain:
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
                    self._ctl_protocol_error(f"unexpected {t.__name__} on the control connection")
        except (ConnectionClosed, OSError):
            pass
        # The host is gone: cancel every handler, give them a moment, exit 0.
        self._post(self.on_host_gone)
        self.all_returned.wait(HOST_GONE_GRACE)
        _exit(0)

    def _post(self, fn, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass

    def _ctl_protocol_error(self, why: str) -> None:
        _log(f"protocol error on the control connection: {why}")
        _exit(1)

    def _backstop_bye(self) -> None:
        # The event loop did not end the drain in time (a handler blocks
        # it): say bye from here and exit.
        _log("drain: the event loop did not answer in time; abandoning handlers")
        self.bye_once()
        _exit(0)


def _start_failed(why: str) -> None:
    _log(why)
    _exit(2)


def _take_fds() -> tuple:
    env = os.environ
    if env.get("SKULK_PROTOCOL") != "1":
        _start_failed("must be started by skulk-host: SKULK_PROTOCOL is not 1")
    try:
        cfd = int(env["SKULK_CONTROL_FD"])
        sfd = int(env["SKULK_STREAMS_FD"])
    except (KeyError, ValueError):
        _start_failed("must be started by skulk-host: SKULK_CONTROL_FD or SKULK_STREAMS_FD is not set")
    try:
        control = socket.socket(fileno=cfd)
        listener = socket.socket(fileno=sfd)
    except OSError as e:
        _start_failed(f"must be started by skulk-host: fds 3 and 4 are not sockets ({e.strerror})")
    if control.type != socket.SOCK_STREAM or listener.type != socket.SOCK_STREAM:
        _start_failed("fd 3 and fd 4 must be stream sockets")
    if not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        _start_failed("fd 4 must be a listening socket")
    control.set_inheritable(False)
    listener.set_inheritable(False)
    return control, listener


def _handshake(control: socket.socket, tools: list, sdk: str, max_streams: int, own: Limits) -> Startup:
    t0 = time.monotonic()
    hello = Hello([1], sdk, os.getpid(), max_streams, own, [t.descriptor() for t in tools])
    head, _ = encode_packet(hello, Limits(1 << 20))
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
                    _start_failed("startup unreadable: a length over the limits")
                if a:
                    _start_failed("startup unreadable: an attachment on a control packet")
                if len(buf) >= PREFIX_LEN + h + a:
                    break
            left = STARTUP_TIMEOUT - (time.monotonic() - t0)
            if left <= 0:
                raise socket.timeout
            control.settimeout(left)
            chunk = control.recv(65536)
            if not chunk:
                _start_failed("the host closed the control connection before startup")
            buf += chunk
    except socket.timeout:
        _start_failed(f"no startup within {STARTUP_TIMEOUT:.0f} s")
    except OSError as e:
        _start_failed(f"control connection: {e.strerror}")
    control.settimeout(None)
    if len(buf) > PREFIX_LEN + h + a:
        # A packet right behind startup: keep it for the control thread.
        pass
    try:
        p = decode_header(bytes(buf[PREFIX_LEN : PREFIX_LEN + h]), a)
    except (ProtocolError, InvalidPacketError):
        _start_failed("the first control packet is not a readable startup")
    if type(p) is not Startup:
        _start_failed("the first control packet is not startup")
    if p.protocol != 1:
        _start_failed("startup chose a protocol version this child did not offer")
    p._rest = bytes(buf[PREFIX_LEN + h + a :])  # type: ignore[attr-defined]
    return p


def main(tools: list, *, sdk: str = SDK, max_streams: int = 4096, limits: Optional[Limits] = None,
         switch_interval: Optional[float] = None) -> None:
    """Serve tools as a Skulk child until the host drains it or goes
    away, then exit the process: 0 when drained or when the host is gone,
    2 with a one-line reason on stderr when started outside a host or when
    the start fails, 1 when the host broke the protocol on the control
    connection. Never returns.

    Before anything else it raises ValueError for a tool id given twice,
    and FieldError (a ValueError) ``tools.id`` or ``tools.version`` for a
    tool whose id is not 1..128 characters of valid UTF-8 or whose version
    is over 128 characters: the host would refuse the hello."""
    ids = set()
    for t in tools:
        if t.id in ids:
            raise ValueError(f"tool id given twice: {t.id!r}")
        ids.add(t.id)
        tool_map(ToolDescriptor(t.id, t.version))
    # A thread waiting for the GIL gets it within this interval: it bounds
    # how long CPU-bound Python in a handler can delay a pong.
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    control, listener = _take_fds()
    own = (limits or Limits()).effective()
    startup = _handshake(control, tools, sdk, max_streams, own)
    eff = own.min(startup.limits)
    rt = _Runtime(tools, startup, eff, control, listener)
    rest = getattr(startup, "_rest", b"")
    if rest:
        _prime_control(rt, rest)
    try:
        asyncio.run(rt.serve())
    except KeyboardInterrupt:
        pass
    _exit(0)


def _prime_control(rt: _Runtime, rest: bytes) -> None:
    # Bytes that arrived with startup are handed to the control thread by
    # wrapping its socket's first reads.
    sock = rt.control

    class _Primed:
        def __init__(self) -> None:
            self._rest = rest

        def recv(self, n: int) -> bytes:
            if self._rest:
                r, self._rest = self._rest, b""
                return r
            return sock.recv(n)

        def settimeout(self, t) -> None:
            sock.settimeout(t)

        def sendall(self, b) -> None:
            sock.sendall(b)

    rt.control = _Primed()  # type: ignore[assignment]
