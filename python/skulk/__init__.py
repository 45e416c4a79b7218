"""Skulk provider SDK for Python: the streams API's models, the wire
codec, the sequence fence and a child runtime that serves async-generator
tools to a Skulk host, in its own asyncio loop or in yours.

See python/README.md; the contract is docs/protocol.md."""

from ._version import __version__

#: The protocol version this SDK speaks: the major number of __version__.
PROTOCOL_VERSION = int(__version__.split(".")[0])

from .errors import (  # noqa: E402
    AfterTerminalError,
    AttachmentLengthError,
    BadFieldError,
    CallCancelledError,
    CallClosedError,
    CallError,
    CallRefusedError,
    CallsOffError,
    DepthError,
    NotOfferedError,
    TooManyCallsError,
    CallTimeoutError,
    ConnectionClosed,
    DuplicateSequenceError,
    DuplicateTerminalError,
    ErrorCode,
    FieldError,
    HeaderLengthError,
    IncompletePacketError,
    InvalidPacketError,
    MalformedHeaderError,
    ProtocolError,
    SchemaError,
    SequenceError,
    SequenceGapError,
    SkulkError,
    StaleCallError,
    StartError,
    ToolError,
    UnexpectedAttachmentError,
    UnknownTypeError,
    WrongDirectionError,
)
from .frames import (  # noqa: E402
    BlobMedia,
    Direction,
    FrameKind,
    InlineMedia,
    JsonObject,
    JsonValue,
    Media,
    StreamEnd,
    StreamError,
    StreamFrame,
    StreamPacket,
    sanitize_message,
)
from .sequence import Sequence  # noqa: E402
from .wire import (  # noqa: E402
    Limits,
    Packet,
    Startup,
    StreamInvoke,
    decode_packet,
    encode_packet,
    read_packet,
    write_packet,
)
from .tracecontext import TraceContext  # noqa: E402
from .nested import CallStart, NestedCall  # noqa: E402
from .child import Cause, Dispatch, Input, Output, StreamHandler, Tool, execute_stream, main, serve  # noqa: E402

__all__ = [
    "__version__", "PROTOCOL_VERSION",
    # models
    "StreamFrame", "StreamEnd", "StreamError", "InlineMedia", "BlobMedia", "Media", "StreamPacket", "Packet",
    "Direction", "FrameKind", "ErrorCode", "JsonValue", "JsonObject", "sanitize_message",
    # codec and fence
    "Limits", "Startup", "StreamInvoke", "encode_packet", "decode_packet", "read_packet", "write_packet", "Sequence",
    # serving
    "Tool", "StreamHandler", "Output", "Dispatch", "Input", "Cause", "execute_stream", "serve", "main", "TraceContext",
    "NestedCall", "CallStart",
    # errors
    "SkulkError", "FieldError", "SchemaError", "SequenceError", "StaleCallError", "WrongDirectionError",
    "DuplicateTerminalError", "AfterTerminalError", "SequenceGapError", "DuplicateSequenceError", "ProtocolError",
    "HeaderLengthError", "AttachmentLengthError", "MalformedHeaderError", "UnknownTypeError",
    "UnexpectedAttachmentError", "BadFieldError", "InvalidPacketError", "ConnectionClosed", "IncompletePacketError",
    "ToolError", "StartError", "CallCancelledError", "CallTimeoutError", "CallRefusedError", "CallsOffError",
    "NotOfferedError", "TooManyCallsError", "DepthError", "CallClosedError", "CallError",
]
