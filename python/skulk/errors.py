"""The SDK's exceptions: one base, :class:`SkulkError`, for everything the
SDK raises, and one cancellation type, :class:`CallCancelledError`.

Every message names the field or rule at fault and never the value, so
an exception is safe to log and to send to a peer.

::

    SkulkError
    ├── FieldError (also a ValueError)            a field breaks a rule
    │   └── SchemaError                           output breaks the tool's schema
    ├── SequenceError (also a ValueError)         the fence refused a frame
    │   ├── StaleCallError, WrongDirectionError
    │   ├── DuplicateTerminalError, AfterTerminalError
    │   └── SequenceGapError, DuplicateSequenceError
    ├── ProtocolError                             the connection is unusable
    │   ├── HeaderLengthError, AttachmentLengthError
    │   ├── MalformedHeaderError, UnknownTypeError
    │   └── UnexpectedAttachmentError, BadFieldError
    ├── InvalidPacketError                        one packet refused, still in step
    ├── ConnectionClosed (also a ConnectionError) EOF or reset
    │   └── IncompletePacketError                 EOF inside a packet
    ├── ToolError                                 raised by a handler to fail its call
    ├── StartError                                the child could not start
    ├── CallRefusedError                          a nested call refused before anything was sent
    │   ├── CallsOffError, NotOfferedError
    │   └── TooManyCallsError, DepthError
    ├── CallClosedError                           a send on a nested call's closed direction
    └── CallError                                 a nested call failed or was cancelled

    asyncio.CancelledError
    └── CallCancelledError                        the call was cancelled (``cause``)
        └── CallTimeoutError                      its timeout_ms passed

:class:`CallCancelledError` derives from :class:`asyncio.CancelledError`
and not from :class:`SkulkError`, so that ``except Exception`` in a
handler never swallows a cancellation, as with every asyncio
cancellation.
"""

from __future__ import annotations

import asyncio
from typing import Literal, Optional

__all__ = [
    "SkulkError",
    "FieldError",
    "SchemaError",
    "SequenceError",
    "StaleCallError",
    "WrongDirectionError",
    "DuplicateTerminalError",
    "AfterTerminalError",
    "SequenceGapError",
    "DuplicateSequenceError",
    "ProtocolError",
    "HeaderLengthError",
    "AttachmentLengthError",
    "MalformedHeaderError",
    "UnknownTypeError",
    "UnexpectedAttachmentError",
    "BadFieldError",
    "InvalidPacketError",
    "ConnectionClosed",
    "IncompletePacketError",
    "ToolError",
    "StartError",
    "CallRefusedError",
    "CallsOffError",
    "NotOfferedError",
    "TooManyCallsError",
    "DepthError",
    "CallClosedError",
    "CallError",
    "CallCancelledError",
    "CallTimeoutError",
    "ErrorCode",
]

#: The codes of a failed or cancelled frame's error (docs/protocol.md §4).
ErrorCode = Literal["provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame"]


class SkulkError(Exception):
    """The base of every exception the SDK raises, except the
    cancellation type :class:`CallCancelledError`."""


class FieldError(SkulkError, ValueError):
    """A field that breaks a rule of docs/protocol.md §3/§4 or of the
    streams API's models: ``field`` is its name (dotted for nested ones,
    e.g. ``media.sample_rate``), ``reason`` the rule. The message never
    includes the field's value."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[FieldError], tuple[str, str]]:
        return (type(self), (self.field, self.reason))


class SchemaError(FieldError):
    """A payload that breaks one of its tool's schemas, as the host reports
    it: ``schema`` is "output" (a chunk's payload against output_schema)
    or "result" (completed's against result_schema); ``field`` the JSON
    pointer of the offending value ("" for the payload itself);
    ``keyword`` the JSON Schema keyword that failed; ``value`` what the
    value is (its JSON type and size), never the value itself."""

    def __init__(self, schema: str, field: str, keyword: str, value: str) -> None:
        self.schema = schema
        self.keyword = keyword
        self.value = value
        msg = f"{schema} payload breaks its schema at {field or '(root)'}"
        if keyword:
            msg += f" ({keyword})"
        if value:
            msg += f": got {value}"
        super().__init__(field, msg)
        self.args = (msg,)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[SchemaError], tuple[str, str, str, str]]:  # type: ignore[override]
        return (type(self), (self.schema, self.field, self.keyword, self.value))


class SequenceError(SkulkError, ValueError):
    """A frame the fence (:class:`skulk.Sequence`) refused. Each rule has
    its own subclass; the message names sequence numbers, never the
    frame's content."""


class StaleCallError(SequenceError):
    """The frame belongs to another call."""


class WrongDirectionError(SequenceError):
    """The frame travels the other way."""


class DuplicateTerminalError(SequenceError):
    """A second terminal after the direction's terminal."""


class AfterTerminalError(SequenceError):
    """A non-terminal frame after the direction's terminal. Also thrown
    into a handler that yields after its call's terminal was sent: the
    frame is refused and never sent."""


class SequenceGapError(SequenceError):
    """The sequence is above the next expected one."""


class DuplicateSequenceError(SequenceError):
    """The sequence is below the next expected one (a replay)."""


class ProtocolError(SkulkError):
    """A packet that breaks docs/protocol.md §2 (or a control packet with a
    bad field): the connection is unusable and the side that sees it
    closes it."""


class HeaderLengthError(ProtocolError):
    """H is 0 or above max_header."""


class AttachmentLengthError(ProtocolError):
    """A is above max_attachment."""


class MalformedHeaderError(ProtocolError):
    """The header is not exactly one MessagePack map with string keys."""


class UnknownTypeError(ProtocolError):
    """``t`` is missing, not a string, or not a packet type."""


class UnexpectedAttachmentError(ProtocolError):
    """An attachment on a packet other than a frame with inline media."""


class BadFieldError(ProtocolError):
    """A control packet with a field of the wrong type or out of range."""


class InvalidPacketError(SkulkError):
    """A frame, invoke or end that parsed whole but breaks §3/§4. The packet
    (and its attachment) was consumed, so the connection is still in step.

    ``packet_type`` is "frame", "invoke" or "end"; ``call_id`` the packet's
    call id when it is a valid one, else None; ``error`` the FieldError."""

    def __init__(self, packet_type: str, call_id: Optional[str], error: FieldError) -> None:
        super().__init__(f"invalid {packet_type}: {error}")
        self.packet_type = packet_type
        self.call_id = call_id
        self.error = error


class ConnectionClosed(SkulkError, ConnectionError):
    """The peer closed the connection at a packet boundary (EOF), or it was
    reset or closed under a pending read or write."""


class IncompletePacketError(ConnectionClosed):
    """The connection ended in the middle of a packet."""


class ToolError(SkulkError):
    """Raise from a handler to fail its call with this code and message
    (sanitized: valid UTF-8, at most 2,048 characters; never put secrets in
    it). Any other exception fails the call with provider_error "handler
    raised <type>", its traceback going to the ``skulk`` logger only."""

    def __init__(self, message: str, code: ErrorCode = "provider_error") -> None:
        super().__init__(message)
        self.message = message
        self.code: ErrorCode = code


class StartError(SkulkError):
    """The child could not start: not started by a Skulk host (no fds 3 and
    4), or the host's startup was missing, late or unreadable. The message
    says which, in one line."""


class CallRefusedError(SkulkError):
    """A call through the host (``call.call``, docs/protocol.md §8)
    refused by the SDK before anything was sent: one of its subclasses.
    Arguments that break the tool's ``arguments_schema`` are a
    :class:`SchemaError` (``schema`` "arguments") instead."""


class CallsOffError(CallRefusedError):
    """The host offers no calls (its startup has no ``calls`` map)."""

    def __init__(self) -> None:
        super().__init__("the host offers no calls")


class NotOfferedError(CallRefusedError):
    """The host does not offer the tool. The message does not name it."""

    def __init__(self) -> None:
        super().__init__("tool not offered by the host")


class TooManyCallsError(CallRefusedError):
    """The child has the host's ``max_in_flight`` calls open already."""

    def __init__(self) -> None:
        super().__init__("too many calls in flight through the host")


class DepthError(CallRefusedError):
    """The call would sit deeper in its tree than the host's
    ``max_depth``: a loop such as A → B → A ends here. ``depth`` is the
    depth the call would have had, ``limit`` the host's max_depth."""

    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"call depth {depth} is over the host's limit of {limit}")
        self.depth = depth
        self.limit = limit

    def __reduce__(self) -> tuple[type[DepthError], tuple[int, int]]:
        return (type(self), (self.depth, self.limit))


class CallClosedError(SkulkError):
    """A send or close_send on a call through the host whose caller
    direction was closed (close_send, cancel) or that has ended."""


class CallError(SkulkError):
    """A call through the host that did not complete: the host's failed
    or cancelled terminal (``code``, ``message``), or one the SDK made up
    because the call connection broke first (``synthetic``)."""

    def __init__(self, code: ErrorCode, message: str = "", synthetic: bool = False) -> None:
        s = "call " + ("(synthetic) " if synthetic else "") + code
        if message:
            s += ": " + message
        super().__init__(s)
        self.code: ErrorCode = code
        self.message = message
        self.synthetic = synthetic

    def __reduce__(self) -> tuple[type[CallError], tuple[ErrorCode, str, bool]]:
        return (type(self), (self.code, self.message, self.synthetic))


class CallCancelledError(asyncio.CancelledError):
    """The call was cancelled: raised by a handler's input (``async for``
    over its frames), by ``call.flush()``, and thrown into a handler that
    yields after its cancellation. ``cause`` is a :class:`skulk.Cause`
    value saying why. Like every asyncio cancellation it is not an
    ``Exception``: a handler that catches it should clean up and return."""

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause

    def __reduce__(self) -> tuple[type[CallCancelledError], tuple[str]]:
        return (type(self), (self.cause,))


class CallTimeoutError(CallCancelledError):
    """The call's ``timeout_ms`` passed (cause ``timeout``): the SDK fails
    the call with ``failed timeout``."""

    def __init__(self, cause: str = "timeout") -> None:
        super().__init__(cause)


def cancelled_error(cause: str) -> CallCancelledError:
    """The cancellation exception for cause: CallTimeoutError for a
    timeout, CallCancelledError otherwise."""
    if cause == "timeout":
        return CallTimeoutError(cause)
    return CallCancelledError(cause)
