"""The handles of a call a handler makes through its host (docs/protocol.md
§8): :class:`NestedCall`, the call's caller side, and :class:`CallStart`,
what ``call.call(tool, args)`` returns.

They are declared here, below the packets, so that
``StreamInvoke.call`` can name them; the child runtime
(skulk.hostcall) implements NestedCall and starts the calls.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Any, Awaitable, Generator, Optional, Protocol

from .errors import CallsOffError
from .frames import JsonObject, Media, StreamFrame

__all__ = ["NestedCall", "CallStart"]


class NestedCall(abc.ABC):
    """A call a handler makes through its host: an async iterator of the
    callee's provider frames (chunks, then the terminal, last), with
    ``send``, ``close_send``, ``wait`` and ``cancel``.

    The call must be read to its end, waited for, or cancelled; one that
    is still open when its handler returns is cancelled, and the
    handler's terminal waits for its end (at most the host's
    ``cancel_grace_ms``). Used as ``async with``, the block's end cancels
    it unless it has ended. One task reads it at a time."""

    #: Resolved once the call ended.
    done: asyncio.Future[None]

    @property
    @abc.abstractmethod
    def id(self) -> str:
        """The call's id on its call connection."""

    @property
    @abc.abstractmethod
    def terminal(self) -> Optional[StreamFrame]:
        """The call's terminal once it ended, else None."""

    @property
    @abc.abstractmethod
    def synthetic(self) -> bool:
        """Whether the SDK made the terminal up (the call connection broke,
        or was closed by a cancel, before the host's terminal)."""

    @abc.abstractmethod
    async def send(self, payload: Optional[JsonObject] = None, media: Optional[Media] = None) -> None:
        """Send one caller chunk: a payload, media, or both. The payload is
        checked against the tool's ``input_schema`` first (SchemaError
        "input", nothing sent; with jsonschema installed). It waits while
        the host does not read (backpressure). Raises CallClosedError
        after close_send, cancel or the call's end, ConnectionClosed when
        the connection broke."""

    @abc.abstractmethod
    async def close_send(self) -> None:
        """End the caller's direction (its completed): the callee's input
        ends, its output goes on. Raises CallClosedError when the
        direction was closed already (a second close_send, or after
        cancel); after the call's end it does nothing."""

    @abc.abstractmethod
    async def cancel(self) -> None:
        """Cancel the call and wait for its end (at most the host's
        ``cancel_grace_ms``, then the connection is closed). Chunks not
        read yet are dropped: iteration then yields the terminal only
        (``cancelled``, unless the callee ended first). Safe to call more
        than once and after the end."""

    @abc.abstractmethod
    async def wait(self) -> Optional[JsonObject]:
        """Read the call to its end (chunks not read yet are dropped) and
        return the completed terminal's payload (None when it has none);
        raise CallError for a failed or cancelled terminal."""

    def __aiter__(self) -> NestedCall:
        return self

    @abc.abstractmethod
    async def __anext__(self) -> StreamFrame:
        """The next provider frame: chunks in order, then the terminal;
        then StopAsyncIteration."""

    async def __aenter__(self) -> NestedCall:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.done.done():
            await self.cancel()


class _Caller(Protocol):
    """What starts a call through the host for a CallStart: the stream
    the handler's call is served on (the child runtime's call)."""

    def start_call(self, tool: str, arguments: Optional[JsonObject], detached: bool,
                   timeout: Optional[float], whole: Optional[list[JsonObject]] = None) -> Awaitable[NestedCall]:
        """Check the call, then dial (or reuse) a call connection and
        write its invoke (with its whole input and completed when whole
        is not None): the started NestedCall."""
        ...


class CallStart:
    """What ``call.call(...)`` returns: await it for the
    :class:`NestedCall`, or use it as ``async with`` (the block's end
    cancels the call unless it ended)."""

    def __init__(self, caller: Optional[_Caller], tool: str, arguments: Optional[JsonObject], detached: bool,
                 timeout: Optional[float], whole: Optional[list[JsonObject]] = None) -> None:
        self._caller = caller
        self._tool = tool
        self._args = arguments
        self._detached = detached
        self._timeout = timeout
        self._whole = whole  # the call's whole input, or None: sent with send
        self._call: Optional[NestedCall] = None

    def __await__(self) -> Generator[Any, None, NestedCall]:
        return self._start().__await__()

    async def __aenter__(self) -> NestedCall:
        self._call = await self._start()
        return self._call

    async def __aexit__(self, *exc: object) -> None:
        if self._call is not None:
            await self._call.__aexit__(*exc)

    async def _start(self) -> NestedCall:
        if self._caller is None:  # an invoke not served on a stream
            raise CallsOffError()
        return await self._caller.start_call(self._tool, self._args, self._detached, self._timeout, self._whole)
