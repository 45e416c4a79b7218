"""Run a handler in-process against a scripted caller, for unit tests
(pytest or unittest), without a host.

The handler runs on the SDK's real stream path: a Unix socketpair, the
invoke and caller frames written as the host writes them, the child's
reader, fences, ingress queue, cancellation and writer, and its output
read back and fenced as the host reads it. Output is checked against the
tool's ``output_schema`` and ``result_schema`` (it needs jsonschema), so
a test sees the refusal the host would give::

    from skulk.testing import call_tool

    def test_upper():
        res = call_tool(upper_tool, inputs=[{"text": "a"}, {"text": "b"}])
        assert res.outcome == "completed"
        assert [c.payload for c in res.chunks] == [{"text": "A"}, {"text": "B"}]

``call_tool`` runs its own event loop; in an async test, ``await
run_tool(...)`` instead.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Iterable, Optional, Union

from .child import StreamHandler, Tool, _Runtime
from .errors import ConnectionClosed, FieldError
from .frames import BlobMedia, InlineMedia, JsonObject, Media, StreamEnd, StreamError, StreamFrame
from .schema import OutputChecker
from .sequence import Sequence
from .wire import Calls, Limits, Startup, StreamInvoke, read_packet, write_packet

__all__ = ["CallResult", "CallerInput", "run_tool", "call_tool"]

#: One caller chunk of a script: a payload, media, or both as a pair.
CallerInput = Union[JsonObject, Media, tuple[Optional[JsonObject], Optional[Media]]]

#: The call id the scripted caller gives its call.
CALL_ID = "test-call"


@dataclass
class CallResult:
    """What the scripted caller read: every provider frame in order (the
    terminal last) and whether the child's end followed."""

    frames: list[StreamFrame] = field(default_factory=list)
    ended: bool = False

    @property
    def chunks(self) -> list[StreamFrame]:
        """The provider's chunks."""
        return [f for f in self.frames if f.kind == "chunk"]

    @property
    def payloads(self) -> list[Optional[JsonObject]]:
        """The payloads of the provider's chunks."""
        return [f.payload for f in self.chunks]

    @property
    def terminal(self) -> Optional[StreamFrame]:
        """The provider's terminal, or None when the call did not reach
        one."""
        return self.frames[-1] if self.frames and self.frames[-1].is_terminal() else None

    @property
    def outcome(self) -> Optional[str]:
        """"completed", "failed" or "cancelled" (the terminal's kind)."""
        t = self.terminal
        return None if t is None else t.kind

    @property
    def result(self) -> Optional[JsonObject]:
        """The completed terminal's payload."""
        t = self.terminal
        return t.payload if t is not None and t.kind == "completed" else None

    @property
    def error(self) -> Optional[StreamError]:
        """The failed or cancelled terminal's error."""
        t = self.terminal
        return None if t is None else t.error


def _tool(tool: Union[Tool, StreamHandler]) -> Tool:
    if isinstance(tool, Tool):
        return tool
    return Tool("tool", tool)


def _chunk(seq: int, item: CallerInput) -> StreamFrame:
    payload: Optional[JsonObject]
    media: Optional[Media]
    if isinstance(item, (InlineMedia, BlobMedia)):
        payload, media = None, item
    elif isinstance(item, tuple):
        payload, media = item
    else:
        payload, media = item, None
    return StreamFrame(CALL_ID, "caller_to_provider", seq, "chunk", payload, media)


async def run_tool(
    tool: Union[Tool, StreamHandler],
    arguments: Optional[JsonObject] = None,
    inputs: Iterable[CallerInput] = (),
    *,
    complete: Union[bool, JsonObject] = True,
    caller_cancel: bool = False,
    cancel_after_chunks: Optional[int] = None,
    timeout_ms: int = 0,
    cancel_grace_ms: int = 1000,
    check_output: bool = True,
    limits: Optional[Limits] = None,
    timeout: float = 30.0,
    calls: Optional[Calls] = None,
    depth: int = 0,
) -> CallResult:
    """Call tool (a Tool, or a bare handler) once, as a host would, and
    return what the caller read up to the child's end.

    The caller sends ``arguments`` (as given: no schema defaults are
    filled), then each of ``inputs`` as a chunk (a payload dict, media, or
    a (payload, media) pair), then its terminal: ``completed`` (with
    ``complete`` as its payload when that is a dict), ``cancelled`` when
    ``caller_cancel``, or nothing when ``complete`` is False (the caller
    direction stays open until the provider's terminal).
    ``cancel_after_chunks`` sends a control cancel once that many
    provider chunks were read; ``timeout_ms`` is the invoke's.
    ``check_output`` checks payloads against the tool's output_schema
    and result_schema (a SchemaError fails the call with
    ``failed invalid_frame``). Raises TimeoutError when the call does
    not end within ``timeout`` seconds, and a SequenceError or
    FieldError when the child writes what the host would refuse.

    ``calls`` is the startup's offer of calls through the host (the test
    serves its ``socket``; None: the host offers none), ``depth`` the
    invoke's depth in its tree."""
    t = _tool(tool)
    if check_output:
        # ImportError without jsonschema, SchemaError for a schema that
        # does not compile: raised here, to the test, not inside the call.
        OutputChecker(t.output_schema, t.result_schema)
    loop = asyncio.get_running_loop()
    startup = Startup(1, "test", Limits(), 0, cancel_grace_ms, 8, calls)
    eff = (limits or Limits()).effective()
    rt = _Runtime([t], startup, eff, None, None, check_output=check_output)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    writer: Optional[asyncio.StreamWriter] = None
    feeder: Optional[asyncio.Task[None]] = None
    try:
        rt.add_conn(a)
        reader, writer = await asyncio.open_unix_connection(sock=b)
        w = writer

        async def feed() -> None:
            await write_packet(w, StreamInvoke(CALL_ID, t.id, dict(arguments or {}), timeout_ms,
                                                depth=depth, tree="test-tree" if depth else ""), eff)
            await write_packet(w, StreamFrame(CALL_ID, "caller_to_provider", 0, "started"), eff)
            seq = 1
            for item in inputs:
                await write_packet(w, _chunk(seq, item), eff)
                seq += 1
            if caller_cancel:
                await write_packet(w, StreamFrame(CALL_ID, "caller_to_provider", seq, "cancelled"), eff)
            elif complete is not False:
                payload = complete if isinstance(complete, dict) else None
                await write_packet(w, StreamFrame(CALL_ID, "caller_to_provider", seq, "completed", payload), eff)

        feeder = loop.create_task(feed())
        res = CallResult()
        fence = Sequence(CALL_ID, "provider_to_caller", next_sequence=1)
        async with asyncio.timeout(timeout):
            while True:
                try:
                    p = await read_packet(reader, eff)
                except ConnectionClosed:
                    break
                if isinstance(p, StreamEnd):
                    if not fence.closed:
                        raise FieldError("end", "before the provider's terminal")
                    res.ended = True
                    break
                if not isinstance(p, StreamFrame):
                    raise FieldError("t", "not a frame or end")
                fence.accept(p)
                res.frames.append(p)
                if cancel_after_chunks is not None and len(res.chunks) == cancel_after_chunks and not p.is_terminal():
                    rt.on_cancel(CALL_ID)
        return res
    finally:
        if feeder is not None:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
        else:
            b.close()
        await rt._shutdown()


def call_tool(
    tool: Union[Tool, StreamHandler],
    arguments: Optional[JsonObject] = None,
    inputs: Iterable[CallerInput] = (),
    *,
    complete: Union[bool, JsonObject] = True,
    caller_cancel: bool = False,
    cancel_after_chunks: Optional[int] = None,
    timeout_ms: int = 0,
    cancel_grace_ms: int = 1000,
    check_output: bool = True,
    limits: Optional[Limits] = None,
    timeout: float = 30.0,
    calls: Optional[Calls] = None,
    depth: int = 0,
) -> CallResult:
    """``run_tool`` in an event loop of its own, for a test that is not
    async. Must not be called from a running event loop."""
    return asyncio.run(run_tool(tool, arguments, inputs, complete=complete, caller_cancel=caller_cancel,
                                cancel_after_chunks=cancel_after_chunks, timeout_ms=timeout_ms,
                                cancel_grace_ms=cancel_grace_ms, check_output=check_output, limits=limits,
                                timeout=timeout, calls=calls, depth=depth))
