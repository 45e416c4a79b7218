"""A stream connection on the event loop: a bounded read buffer, packets
read into place, and a writer that sends header and attachment with one
vectored write (sendmsg) without copying the attachment."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import deque
from typing import Optional

from .errors import ConnectionClosed, IncompletePacketError, InvalidPacketError
from .frames import Bytes
from .wire import PREFIX_LEN, Limits, Packet, _attach, check_lengths, decode_header

_prefix = struct.Struct(">II")

# READ_CHUNK bounds one recv: what the buffer holds beyond the packet being
# read, so a handler that does not read its input holds at most the 8
# frames of its queue, the one being queued and about 64 KiB more.
READ_CHUNK = 65536
# Attachments up to SMALL are read through the buffer and copied out;
# larger ones are received straight into their own bytearray.
SMALL = 65536
# HIGH bounds the header bytes a writer queues before a write waits.
HIGH = 65536
IOV_MAX = 1024
# COALESCE bounds the small packets gathered before one write.
COALESCE = 65536


class Conn:
    """One stream connection. Reading is for one coroutine at a time;
    writes from the loop's coroutines are ordered as they are made."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, limits: Limits) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = loop
        self.limits = limits
        self._buf = bytearray(2 * READ_CHUNK)
        self._r = 0
        self._w = 0
        self._rfut: Optional[asyncio.Future[None]] = None
        # Unsent bytes, in order; bounded by the writers' waits (HIGH for
        # headers, the attachment being written) plus the SDK's own few
        # terminals and ends per call.
        self._out: deque[memoryview] = deque()
        self._out_bytes = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # (threshold, future)
        # Small packets coalesced before they reach _out (send_small):
        # at most COALESCE bytes plus one header.
        self._pend = bytearray()
        self._flush_h: Optional[asyncio.Handle] = None
        self._writer_on = False
        self.closed = False
        self.broken = False

    # ---------- reading ----------

    async def _recv_into(self, mv: memoryview) -> int:
        while True:
            if self.closed:
                raise ConnectionClosed("connection closed")
            try:
                return self._sock.recv_into(mv)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                raise ConnectionClosed("connection reset") from None
            fut = self._loop.create_future()
            self._rfut = fut
            self._loop.add_reader(self._fd, _wake, fut)
            try:
                await fut
            finally:
                self._rfut = None
                if not self.closed:
                    self._loop.remove_reader(self._fd)

    async def _fill(self, need: int) -> None:
        """Read until the buffer holds need bytes after the read position."""
        while self._w - self._r < need:
            buf = self._buf
            if self._r == self._w:
                self._r = self._w = 0
            if len(buf) - self._r < need or len(buf) - self._w < 4096:
                # Move what is left to the front, growing the buffer if a
                # header (or small attachment) needs more room.
                left = self._w - self._r
                size = max(len(buf), need + READ_CHUNK)
                nb = bytearray(size) if size != len(buf) else buf
                nb[:left] = buf[self._r : self._w]
                self._buf, self._r, self._w = nb, 0, left
                buf = nb
            room = min(len(buf) - self._w, READ_CHUNK)
            with memoryview(buf) as mv:
                n = await self._recv_into(mv[self._w : self._w + room])
            if n == 0:
                if self._w == self._r and need == PREFIX_LEN:
                    raise ConnectionClosed("connection closed")
                raise IncompletePacketError("connection ended inside a packet")
            self._w += n

    async def read_packet(self) -> Packet:
        """The next packet. Lengths are checked before anything past the
        prefix is read. Raises ConnectionClosed (EOF), a ProtocolError, or
        InvalidPacketError once the packet was consumed whole."""
        if self._w - self._r < PREFIX_LEN:
            await self._fill(PREFIX_LEN)
        h, a = _prefix.unpack_from(self._buf, self._r)
        check_lengths(h, a, self.limits)
        small = a <= SMALL
        need = PREFIX_LEN + h + (a if small else 0)
        if self._w - self._r < need:
            await self._fill(need)
        start = self._r + PREFIX_LEN
        with memoryview(self._buf) as mv:
            hb = mv[start : start + h]
            try:
                p = decode_header(hb, a)
            except InvalidPacketError:
                hb.release()
                self._r = start + h
                await self._take(a, small)
                raise
            except BaseException:
                hb.release()
                raise
            hb.release()
        self._r = start + h
        if a:
            _attach(p, await self._take(a, small))
        return p

    async def _take(self, a: int, small: bool) -> Bytes:
        """The next a bytes: an attachment."""
        if a == 0:
            return b""
        if small:
            r = self._r
            data = bytes(self._buf[r : r + a])
            self._r = r + a
            return data
        data = bytearray(a)
        have = min(self._w - self._r, a)
        data[:have] = self._buf[self._r : self._r + have]
        self._r += have
        off = have
        with memoryview(data) as mv:
            while off < a:
                n = await self._recv_into(mv[off:])
                if n == 0:
                    raise IncompletePacketError("connection ended inside an attachment")
                off += n
        return data

    # ---------- writing ----------

    def send_nowait(self, head: bytes, att: Bytes = b"") -> None:
        """Queue a packet without waiting, behind any coalesced small
        packets: for the SDK's own terminals and ends, a bounded few per
        call. Dropped on a broken connection."""
        if self.closed or self.broken:
            return
        bufs: list[Bytes] = []
        if self._pend:
            bufs.append(self._take_pend())
        bufs.append(head)
        if len(att):
            bufs.append(att)
        self._push(bufs)

    def _push(self, bufs: list[Bytes]) -> None:
        if not self._out:
            try:
                n = self._sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._fail()
                return
            self._queue(bufs, n)
        else:
            self._queue(bufs, 0)

    def _take_pend(self) -> memoryview:
        p, self._pend = self._pend, bytearray()
        if self._flush_h is not None:
            self._flush_h.cancel()
            self._flush_h = None
        return memoryview(p).toreadonly()

    def _flush_pend(self) -> None:
        self._flush_h = None
        if self._pend and not self.closed and not self.broken:
            self._push([self._take_pend()])

    def send_small(self, head: bytes) -> bool:
        """Queue a packet without attachment when less than HIGH bytes are
        queued, without waiting: True when it was queued, False when
        nothing was done and the caller must ``await write(head)``.

        The first such packet since the event loop last ran is written at
        once; those that follow it before the loop runs again (a handler
        yielding frames back to back) are coalesced and written together
        with one sendmsg once COALESCE bytes gather, when the loop next
        runs, or before any other packet: a burst of small frames costs a
        system call or two, not one each, and a lone frame is not
        delayed."""
        if self.closed or self.broken or self._out_bytes > HIGH:
            return False
        if self._flush_h is None:  # so _pend is empty
            self._flush_h = self._loop.call_soon(self._flush_pend)
            self._push([head])
            return True
        self._pend += head
        if len(self._pend) >= COALESCE:
            self._push([self._take_pend()])
        return True

    def _queue(self, bufs: list[Bytes], sent: int) -> None:
        for b in bufs:
            mv = b if isinstance(b, memoryview) else memoryview(b)
            if mv.format != "B" or mv.ndim != 1:
                mv = mv.cast("B")
            n = mv.nbytes
            if sent >= n:
                sent -= n
                continue
            if sent:
                mv = mv[sent:]
                sent = 0
            self._out.append(mv)
            self._out_bytes += mv.nbytes
        if self._out and not self._writer_on:
            self._writer_on = True
            self._loop.add_writer(self._fd, self._on_writable)

    async def write(self, head: bytes, att: Bytes = b"") -> None:
        """Write a packet, awaiting the socket's backpressure: a packet with
        an attachment returns once the attachment is written; one without,
        once less than 64 KiB of headers is queued. Cancelled while it
        waits, the packet stays queued (whole) and a mutable attachment's
        unsent bytes are copied, so the caller may reuse them."""
        if self.closed or self.broken:
            raise ConnectionClosed("connection closed")
        self.send_nowait(head, att)
        if self.broken:
            raise ConnectionClosed("connection broken")
        threshold = 0 if len(att) else HIGH
        if self._out_bytes <= threshold:
            return
        fut = self._loop.create_future()
        self._waiters.append((threshold, fut))
        try:
            await fut
        except asyncio.CancelledError:
            self._own_pending()
            raise

    async def flush(self) -> None:
        """Wait until everything queued is written."""
        if self.closed or self.broken:
            raise ConnectionClosed("connection closed")
        if self._pend:
            self._push([self._take_pend()])
        if not self._out:
            return
        fut = self._loop.create_future()
        self._waiters.append((0, fut))
        await fut

    def shutdown_write(self) -> bool:
        """End the connection's writing (shutdown SHUT_WR) and keep its
        reading: the peer sees a hang-up, and its answer can still be
        read. False, and nothing done, while bytes wait unwritten or when
        the socket refuses."""
        if self.closed or self.broken or self.pending():
            return False
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            return False
        self.broken = True  # nothing more can be written
        return True

    def pending(self) -> int:
        """Bytes queued and not yet written."""
        return self._out_bytes + len(self._pend)

    def _own_pending(self) -> None:
        for i, mv in enumerate(self._out):
            if not mv.readonly:
                self._out[i] = memoryview(bytes(mv))

    def _on_writable(self) -> None:
        out = self._out
        while out:
            bufs = list(out) if len(out) <= IOV_MAX else [out[i] for i in range(IOV_MAX)]
            try:
                n = self._sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._fail()
                return
            self._out_bytes -= n
            full = True
            while n:
                mv = out[0]
                if n >= mv.nbytes:
                    n -= mv.nbytes
                    out.popleft()
                else:
                    out[0] = mv[n:]
                    n = 0
                    full = False
            if not full:
                break
        if not out and self._writer_on:
            self._writer_on = False
            self._loop.remove_writer(self._fd)
        self._wake_writers()

    def _wake_writers(self) -> None:
        if not self._waiters:
            return
        keep = []
        for th, fut in self._waiters:
            if fut.done():
                continue
            if self.broken or self.closed:
                fut.set_exception(ConnectionClosed("connection closed"))
            elif self._out_bytes <= th:
                fut.set_result(None)
            else:
                keep.append((th, fut))
        self._waiters = keep

    def _fail(self) -> None:
        self.broken = True
        self._drop_pend()
        self._out.clear()
        self._out_bytes = 0
        if self._writer_on and not self.closed:
            self._writer_on = False
            self._loop.remove_writer(self._fd)
        self._wake_writers()

    def _drop_pend(self) -> None:
        self._pend = bytearray()
        if self._flush_h is not None:
            self._flush_h.cancel()
            self._flush_h = None

    def close(self) -> None:
        """Close the connection; a pending read raises ConnectionClosed,
        pending writes are dropped."""
        if self.closed:
            return
        if self._writer_on:
            self._loop.remove_writer(self._fd)
            self._writer_on = False
        if self._rfut is not None:
            self._loop.remove_reader(self._fd)
        self.closed = True
        self._drop_pend()
        self._out.clear()
        self._out_bytes = 0
        if self._rfut is not None and not self._rfut.done():
            self._rfut.set_exception(ConnectionClosed("connection closed"))
        self._wake_writers()
        try:
            self._sock.close()
        except OSError:
            pass


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
