"""Skulk provider SDK for Python: the wire codec, the sequence fence and
a child runtime that serves async-generator tools to a Skulk host.

See python/README.md; the contract is docs/protocol.md."""

#: The SDK's version. Its major number is the version of the Skulk protocol
#: it speaks (docs/protocol.md: hello offers it, startup chooses it).
__version__ = "1.0.0"
#: The protocol version this SDK speaks: the major number of __version__.
PROTOCOL_VERSION = int(__version__.split(".")[0])

from .frames import (  # noqa: E402
    BlobMedia,
    FieldError,
    InlineMedia,
    StreamEnd,
    StreamError,
    StreamFrame,
    sanitize_message,
)
from .sequence import (  # noqa: E402
    AfterTerminal,
    Duplicate,
    DuplicateTerminal,
    Gap,
    Sequence,
    SequenceError,
    StaleCall,
    WrongDirection,
)
from .wire import (  # noqa: E402
    AttachmentLengthError,
    BadFieldError,
    ConnectionClosed,
    HeaderLengthError,
    InvalidPacketError,
    Limits,
    MalformedHeaderError,
    PacketCutShort,
    ProtocolError,
    Startup,
    StreamInvoke,
    StreamPacket,
    UnexpectedAttachmentError,
    UnknownTypeError,
    decode_packet,
    encode_packet,
    read_packet,
    write_packet,
)
from .tracecontext import TraceContext  # noqa: E402
from .child import CallCancelled, Cause, Input, Terminated, Tool, ToolError, main  # noqa: E402

__all__ = [
    "StreamFrame", "StreamEnd", "StreamError", "InlineMedia", "BlobMedia", "StreamPacket", "FieldError",
    "sanitize_message", "Sequence", "SequenceError", "StaleCall", "WrongDirection", "DuplicateTerminal",
    "AfterTerminal", "Gap", "Duplicate", "Limits", "Startup", "StreamInvoke", "ProtocolError",
    "HeaderLengthError", "AttachmentLengthError", "MalformedHeaderError", "UnknownTypeError",
    "UnexpectedAttachmentError", "BadFieldError", "InvalidPacketError", "ConnectionClosed", "PacketCutShort",
    "encode_packet", "decode_packet", "read_packet", "write_packet", "Tool", "ToolError", "Cause",
    "CallCancelled", "Terminated", "Input", "main", "TraceContext",
]
