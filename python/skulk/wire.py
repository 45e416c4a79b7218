"""Packets: the length-prefixed MessagePack headers of docs/protocol.md §2
and §3, their encoder and their strict decoder.

Every packet is ``uint32 BE H``, ``uint32 BE A``, H bytes of header (one
MessagePack map with string keys), A bytes of raw attachment (inline
media only). Lengths are checked before anything else is read.
"""

from __future__ import annotations

import asyncio
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Union, cast

import msgpack

from .errors import (
    AttachmentLengthError,
    BadFieldError,
    ConnectionClosed,
    ErrorCode,
    FieldError,
    HeaderLengthError,
    IncompletePacketError,
    InvalidPacketError,
    MalformedHeaderError,
    ProtocolError,
    UnexpectedAttachmentError,
    UnknownTypeError,
)
from .frames import (
    ERROR_CODES,
    BlobMedia,
    Bytes,
    InlineMedia,
    JsonObject,
    Media,
    StreamEnd,
    StreamError,
    StreamFrame,
    StreamPacket,
    check_call_id,
    check_chars,
    check_object,
    sanitize_message,
    valid_utf8,
)
from .nested import CallStart, _Caller
from .tracecontext import TraceContext, parse_baggage, parse_trace_context

__all__ = [
    "PREFIX_LEN",
    "DEFAULT_MAX_HEADER",
    "DEFAULT_MAX_ATTACHMENT",
    "CEILING_MAX_HEADER",
    "CEILING_MAX_ATTACHMENT",
    "DEFAULT_CANCEL_GRACE_MS",
    "INGRESS_QUEUE",
    "Limits",
    "ToolDescriptor",
    "Hello",
    "Startup",
    "Tools",
    "Calls",
    "Ping",
    "Pong",
    "Cancel",
    "Drain",
    "Bye",
    "StreamInvoke",
    "Packet",
    "StreamPacket",
    "encode_packet",
    "decode_header",
    "decode_packet",
    "check_lengths",
    "read_packet",
    "write_packet",
]

PREFIX_LEN = 8
DEFAULT_MAX_HEADER = 65536
DEFAULT_MAX_ATTACHMENT = 16777216
CEILING_MAX_HEADER = 1 << 20
CEILING_MAX_ATTACHMENT = 1 << 28
DEFAULT_CANCEL_GRACE_MS = 1000
INGRESS_QUEUE = 8
# MAX_TOOL_VERSION_CHARS bounds a tool descriptor's version (§3, hello).
MAX_TOOL_VERSION_CHARS = 128
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_I64 = (1 << 63) - 1

_prefix = struct.Struct(">II")


# ---------- packets ----------


@dataclass
class Limits:
    """Packet limits in bytes; 0 means the default. ``effective`` applies
    the defaults and the hard ceilings."""

    max_header: int = 0
    max_attachment: int = 0

    def effective(self) -> Limits:
        """The limits with 0 replaced by the defaults (64 KiB, 16 MiB) and
        clamped to the ceilings (1 MiB, 256 MiB)."""
        h = self.max_header or DEFAULT_MAX_HEADER
        a = self.max_attachment or DEFAULT_MAX_ATTACHMENT
        return Limits(min(h, CEILING_MAX_HEADER), min(a, CEILING_MAX_ATTACHMENT))

    def min(self, other: Limits) -> Limits:
        """The smaller of each pair, both made effective first."""
        a, b = self.effective(), other.effective()
        return Limits(min(a.max_header, b.max_header), min(a.max_attachment, b.max_attachment))


#: A JSON Schema, as a tool declares it (a JSON object).
Schema = Mapping[str, Any]


@dataclass
class ToolDescriptor:
    """A tool as hello announces it."""

    id: str
    version: str = ""
    description: str = ""
    arguments_schema: Optional[Schema] = None
    input_schema: Optional[Schema] = None
    output_schema: Optional[Schema] = None
    result_schema: Optional[Schema] = None


_SCHEMA_KEYS = ("arguments_schema", "input_schema", "output_schema", "result_schema")


@dataclass
class Hello:
    """The child's first control packet."""

    protocol: list[int]
    sdk: str
    pid: int
    max_streams: int
    limits: Limits
    tools: list[ToolDescriptor]


# MAX_SOCKET_PATH bounds startup's calls.socket in bytes (docs/protocol.md §3).
MAX_SOCKET_PATH = 107


@dataclass
class Calls:
    """startup's calls map: the tools a child may call through its host,
    and where and how (docs/protocol.md §8)."""

    socket: str
    tools: list["ToolDescriptor"] = field(default_factory=list)
    max_depth: int = 1
    max_in_flight: int = 1


@dataclass
class Startup:
    """The host's answer to hello: the chosen protocol version and the
    effective settings (docs/protocol.md §5)."""

    protocol: int
    child_id: str = ""
    limits: Limits = field(default_factory=Limits)
    health_interval_ms: int = 0
    cancel_grace_ms: int = DEFAULT_CANCEL_GRACE_MS
    ingress_queue: int = 0
    calls: Optional[Calls] = None  # None: the host offers no calls
    tools_updates: bool = False  # the host takes Tools packets (this SDK sends none)


@dataclass
class Tools:
    """A child's new tool list, replacing its hello's (docs/protocol.md §3).
    Sent only to a host whose startup has tools_updates; this SDK decodes
    and encodes it but its children do not send it."""

    tools: list[ToolDescriptor] = field(default_factory=list)


@dataclass
class Ping:
    """A health probe from the host; the child answers with a Pong of the
    same nonce."""

    nonce: int = 0


@dataclass
class Pong:
    """The answer to a Ping: calls whose handler runs, and how many of
    them ignored a cancel past cancel_grace_ms."""

    nonce: int = 0
    streams: int = 0
    stuck: int = 0


@dataclass
class Cancel:
    """The host asks the child to cancel a call."""

    call_id: str
    reason: str = ""


@dataclass
class Drain:
    """The host asks the child to finish its calls and say bye."""

    grace_ms: int = 0


@dataclass
class Bye:
    """The child's last control packet after a drain."""

    reason: str = ""


class _Stream(_Caller, Protocol):
    """What a StreamInvoke needs of the stream it is served on (the child
    runtime's call): its cancel cause, its deadline, its flush, and the
    calls through the host it makes."""

    @property
    def cause(self) -> Optional[str]:
        """Why the call was cancelled, or None."""
        ...

    @property
    def deadline(self) -> Optional[float]:
        """The call's deadline on the event loop's clock, or None."""
        ...

    async def flush(self) -> None:
        """Wait until every frame yielded so far has been written."""
        ...


@dataclass(eq=False)
class StreamInvoke:
    """The invoke that starts a call on a stream connection.

    A handler gets the call's StreamInvoke as its first argument; the
    builders ``chunk``, ``completed``, ``failed`` and ``cancelled`` make the
    call's next provider frame (sequence numbers from 1, in the order they
    are built), checked as the frame's constructor checks it. ``deadline``,
    ``cause`` and ``flush`` refer to the stream the SDK serves it on."""

    call_id: str
    tool_id: str
    arguments: JsonObject = field(default_factory=dict)
    timeout_ms: int = 0
    trace: Optional[dict[str, str]] = None
    tree: str = ""
    parent: str = ""
    depth: int = 0  # the call's depth in its tree (docs/protocol.md §8)
    detached: bool = False  # on a call connection: a tree of its own
    _next: int = field(default=1, init=False, repr=False)
    _stream: Optional[_Stream] = field(default=None, init=False, repr=False)

    def chunk(self, payload: Optional[JsonObject] = None, media: Optional[Media] = None) -> StreamFrame:
        """The call's next provider chunk: a payload, media, or both."""
        if payload is not None:
            check_object(payload)
        elif media is None:
            raise FieldError("payload", "chunk needs a payload or media")
        if media is not None and type(media) is not InlineMedia and type(media) is not BlobMedia:
            raise FieldError("media", "not inline or blob media")
        n = self._next
        self._next = n + 1
        return StreamFrame._trusted(self.call_id, "provider_to_caller", n, "chunk", payload, media)

    def completed(self, payload: Optional[JsonObject] = None) -> StreamFrame:
        """The call's completed terminal, with an optional final value."""
        if payload is not None:
            check_object(payload)
        n = self._next
        self._next = n + 1
        return StreamFrame._trusted(self.call_id, "provider_to_caller", n, "completed", payload)

    def failed(self, message: str, code: ErrorCode = "provider_error") -> StreamFrame:
        """The call's failed terminal; the message is sanitized (valid
        UTF-8, at most 2,048 characters): never put secrets in it. The
        code may not be "cancelled" (use ``cancelled``)."""
        if code == "cancelled":
            raise FieldError("error.code", "failed must not carry cancelled")
        err = StreamError(code, sanitize_message(message))
        n = self._next
        self._next = n + 1
        return StreamFrame._trusted(self.call_id, "provider_to_caller", n, "failed", error=err)

    def cancelled(self, message: str = "") -> StreamFrame:
        """The call's cancelled terminal."""
        err = StreamError("cancelled", sanitize_message(message)) if message else None
        n = self._next
        self._next = n + 1
        return StreamFrame._trusted(self.call_id, "provider_to_caller", n, "cancelled", error=err)

    def call(self, tool: str, arguments: Optional[JsonObject] = None, *, detached: bool = False,
             timeout: Optional[float] = None, input: Optional[Iterable[JsonObject]] = None) -> CallStart:
        """Call tool through the host (docs/protocol.md §8) with arguments
        (None for none), as a step of this call: in its tree, with it as
        parent, ending before it ends. Await the result for the
        :class:`skulk.NestedCall`, or use it as ``async with`` (the
        block's end cancels the call unless it ended)::

            async with call.call("lookup", {"word": w}) as nested:
                await nested.close_send()
                async for f in nested:      # chunks, then the terminal
                    ...
                result = await nested.wait()  # or raises CallError

        ``timeout`` (seconds) is the call's deadline; without it, the
        call's is what this call has left (the host cuts it to that in any
        case). ``detached=True`` makes the call a tree of its own that
        outlives this one: its end does not wait for it, nor cancel it,
        and the depth limit does not apply.

        ``input`` makes its payloads the call's whole input (what Go's
        ``child.WithInput`` does): each is checked against the tool's
        ``input_schema`` first, then the invoke, the started frame, one
        chunk per payload and the caller's completed leave in one write,
        so that a unary call (``input=()``) costs the host one read, and
        the host serves it without a goroutine of its own. ``send`` and
        ``close_send`` then raise CallClosedError (the direction is
        closed)::

            result = await (await call.call("lookup", {"word": w}, input=())).wait()

        Refused before anything is sent: CallsOffError (the host offers no
        calls), NotOfferedError, DepthError (deeper than the host's
        max_depth), TooManyCallsError (max_in_flight open), SchemaError
        "arguments" or "input" (with jsonschema installed), FieldError
        ("input" when it is not a JSON object). The host's
        own refusals, and the callee's failures, come back as the call's
        failed terminal (CallError from ``wait``); a call socket that
        cannot be dialed raises a synthetic CallError ``unreachable``."""
        whole = None if input is None else list(input)
        return CallStart(self._stream, tool, arguments, detached, timeout, whole)

    @property
    def trace_context(self) -> Optional[TraceContext]:
        """The W3C trace context of the invoke's ``trace`` map (the host's
        span of the call) as a skulk.TraceContext, or None without a valid
        traceparent: an invalid one is ignored."""
        return parse_trace_context(self.trace)

    @property
    def baggage(self) -> dict[str, str]:
        """The W3C baggage of the invoke's ``trace`` map, {} when none (or
        invalid); with or without a traceparent."""
        return parse_baggage((self.trace or {}).get("baggage"))

    @property
    def cause(self) -> Optional[str]:
        """Why the call was cancelled (a skulk.Cause value), or None."""
        st = self._stream
        return st.cause if st is not None else None

    @property
    def deadline(self) -> Optional[float]:
        """The call's deadline on the event loop's clock (loop.time()), or
        None without timeout_ms."""
        st = self._stream
        return st.deadline if st is not None else None

    async def flush(self) -> None:
        """Wait until every frame yielded so far has been written to the
        socket. Raises CallCancelledError once the call is cancelled."""
        st = self._stream
        if st is not None:
            await st.flush()

    def check(self) -> None:
        """Raise FieldError if a field breaks §3."""
        check_call_id(self.call_id)
        check_call_id(self.tool_id, "tool_id")
        check_object(self.arguments, "arguments")
        if type(self.timeout_ms) is not int or self.timeout_ms < 0:
            raise FieldError("timeout_ms", "must be >= 0")
        if self.trace is not None:
            if type(self.trace) is not dict or any(type(k) is not str or type(v) is not str for k, v in self.trace.items()):
                raise FieldError("trace", "not a map of strings")
        if self.tree:
            check_call_id(self.tree, "tree")
        if self.parent:
            check_call_id(self.parent, "parent")
        if type(self.depth) is not int or self.depth < 0:
            raise FieldError("depth", "must be >= 0")


#: Every packet of docs/protocol.md §3: what read_packet returns and
#: write_packet takes.
Packet = Union[StreamFrame, StreamEnd, StreamInvoke, Hello, Startup, Ping, Pong, Cancel, Drain, Bye, Tools]


# ---------- encoding ----------

_packer = msgpack.Packer(use_bin_type=True, autoreset=True)
_pack: Callable[[object], bytes] = _packer.pack


def _canonical(v: Any) -> Any:
    """v with map keys sorted at every depth (descriptors and schemas are
    encoded canonically, so that equal ones encode to equal bytes)."""
    if type(v) is dict:
        return {k: _canonical(v[k]) for k in sorted(v)}
    if type(v) in (list, tuple):
        return [_canonical(x) for x in v]
    return v


def _limits_map(l: Limits) -> dict[str, int]:
    return {"max_header": l.max_header, "max_attachment": l.max_attachment}


def tool_map(t: ToolDescriptor) -> dict[str, Any]:
    """The map hello carries for t, canonical (sorted schema keys). Raises
    FieldError ``tools.id`` or ``tools.version`` for an id that breaks the
    call id rule or a version over 128 characters (§3, hello), which the
    host would refuse."""
    check_call_id(t.id, "tools.id")
    m: dict[str, Any] = {"id": t.id}
    if t.version:
        check_chars("tools.version", t.version, 0, MAX_TOOL_VERSION_CHARS)
        m["version"] = t.version
    if t.description:
        m["description"] = t.description
    for k in _SCHEMA_KEYS:
        sc = getattr(t, k)
        if sc is not None:
            m[k] = _canonical(sc)
    return m


def _media_map(m: Media) -> dict[str, Any]:
    if type(m) is InlineMedia:
        d: dict[str, Any] = {"kind": "inline", "media_type": m.media_type}
        if m.codec:
            d["codec"] = m.codec
        if m.sample_rate is not None:
            d["sample_rate"] = m.sample_rate
        if m.channels is not None:
            d["channels"] = m.channels
        if m.timestamp_seconds is not None:
            d["timestamp_seconds"] = float(m.timestamp_seconds)
        if m.duration_seconds is not None:
            d["duration_seconds"] = float(m.duration_seconds)
        return d
    assert type(m) is BlobMedia
    return {"kind": "blob", "blob_id": m.blob_id, "size_bytes": m.size_bytes, "sha256": m.sha256, "media_type": m.media_type}


def _frame_header(p: StreamFrame) -> tuple[dict[str, Any], Optional[Bytes]]:
    h: dict[str, Any] = {"t": "frame", "call_id": p.call_id, "direction": p.direction, "sequence": p.sequence, "kind": p.kind}
    att: Optional[Bytes] = None
    if p.payload is not None:
        h["payload"] = p.payload
    if p.media is not None:
        h["media"] = _media_map(p.media)
        if type(p.media) is InlineMedia:
            att = p.media.data
    if p.error is not None:
        h["error"] = {"code": p.error.code, "message": p.error.message}
    return h, att


def _header(p: Packet) -> tuple[dict[str, Any], Optional[Bytes]]:
    """The header map of packet p in our encoder's key order, and its
    attachment (None for none). Validates what the encoder must refuse."""
    if isinstance(p, StreamFrame):
        p.check_fields(check_payload=True)
        return _frame_header(p)
    if isinstance(p, StreamEnd):
        check_call_id(p.call_id)
        return {"t": "end", "call_id": p.call_id}, None
    if isinstance(p, StreamInvoke):
        p.check()
        h: dict[str, Any] = {"t": "invoke", "call_id": p.call_id, "tool_id": p.tool_id, "arguments": p.arguments,
                             "timeout_ms": p.timeout_ms}
        if p.trace is not None:
            h["trace"] = {k: p.trace[k] for k in sorted(p.trace)}
        if p.tree:
            h["tree"] = p.tree
        if p.parent:
            h["parent"] = p.parent
        if p.depth > 0:
            h["depth"] = p.depth
        if p.detached:
            h["detached"] = True
        return h, None
    if isinstance(p, Ping):
        return {"t": "ping", "nonce": p.nonce}, None
    if isinstance(p, Pong):
        return {"t": "pong", "nonce": p.nonce, "streams": p.streams, "stuck": p.stuck}, None
    if isinstance(p, Cancel):
        check_call_id(p.call_id)
        h = {"t": "cancel", "call_id": p.call_id}
        if p.reason:
            h["reason"] = p.reason
        return h, None
    if isinstance(p, Drain):
        return {"t": "drain", "grace_ms": p.grace_ms}, None
    if isinstance(p, Bye):
        h = {"t": "bye"}
        if p.reason:
            h["reason"] = p.reason
        return h, None
    if isinstance(p, Startup):
        h = {
            "t": "startup",
            "protocol": p.protocol,
            "child_id": p.child_id,
            "limits": _limits_map(p.limits),
            "health_interval_ms": p.health_interval_ms,
            "cancel_grace_ms": p.cancel_grace_ms,
            "ingress_queue": p.ingress_queue,
        }
        if p.calls is not None:
            c = p.calls
            h["calls"] = {
                "socket": c.socket,
                "tools": [tool_map(t) for t in c.tools],
                "max_depth": c.max_depth,
                "max_in_flight": c.max_in_flight,
            }
        if p.tools_updates:
            h["tools_updates"] = True
        return h, None
    if isinstance(p, Tools):
        if len(p.tools) > 4096:
            raise FieldError("tools", "more than 4096 tools")
        return {"t": "tools", "tools": [tool_map(t) for t in p.tools]}, None
    if isinstance(p, Hello):
        return {
            "t": "hello",
            "protocol": list(p.protocol),
            "sdk": p.sdk,
            "pid": p.pid,
            "max_streams": p.max_streams,
            "limits": _limits_map(p.limits),
            "tools": [tool_map(t) for t in p.tools],
        }, None
    raise TypeError(f"cannot encode a {type(p).__name__}")


def _finish(h: dict[str, Any], att: Optional[Bytes], l: Limits) -> tuple[bytes, Bytes]:
    try:
        hb = _pack(h)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
        raise FieldError("payload", "has a value with no JSON form") from None
    a = 0 if att is None else (att.nbytes if type(att) is memoryview else len(att))
    if len(hb) > l.max_header:
        raise HeaderLengthError(f"header of {len(hb)} bytes, limit {l.max_header}")
    if a > l.max_attachment:
        raise AttachmentLengthError(f"attachment of {a} bytes, limit {l.max_attachment}")
    return _prefix.pack(len(hb), a) + hb, (b"" if att is None else att)


def encode_packet(p: Packet, limits: Optional[Limits] = None) -> tuple[bytes, Bytes]:
    """Encode packet p: the prefix and header as one bytes object, and the
    attachment (the inline media's own data, not a copy; b"" for none).
    Raises FieldError for a frame or invoke that breaks §3/§4, and
    HeaderLengthError / AttachmentLengthError for one over limits."""
    l = (limits or Limits()).effective()
    h, att = _header(p)
    return _finish(h, att, l)


# ---------- decoding ----------


_Items = Iterable[tuple[Any, Any]]


class _OddMap:
    """A map whose keys are not all distinct strings: kept as its pairs so
    that the rules on duplicate and non-string keys can be applied."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
        self.pairs = pairs

    def items(self) -> list[tuple[Any, Any]]:
        return self.pairs

    def str_keys(self) -> bool:
        return all(type(k) is str for k, _ in self.pairs)


def _hook(pairs: list[tuple[Any, Any]]) -> Any:
    try:
        d = dict(pairs)
    except TypeError:  # an unhashable key (a map or array)
        return _OddMap(pairs)
    if len(d) != len(pairs):
        return _OddMap(pairs)
    for k in d:
        if type(k) is not str:
            return _OddMap(pairs)
    return d


def _unpack(b: Bytes) -> Any:
    return msgpack.unpackb(
        b,
        raw=False,
        unicode_errors="surrogateescape",
        strict_map_key=False,
        object_pairs_hook=_hook,
        timestamp=0,
    )


class _NotJSON(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


_MAXD = 64


def _json(v: Any, depth: int) -> Any:
    """v (decoded) checked for a JSON form and normalized: duplicate keys
    resolved, last wins. depth is v's depth (the outermost map is 1)."""
    t = type(v)
    if t is dict:
        if depth > _MAXD:
            raise _NotJSON("nested too deeply")
        for k, x in v.items():
            if not k.isascii() and not valid_utf8(k):
                raise _NotJSON("has a value with no JSON form")
            tx = type(x)
            if tx is str:
                if not x.isascii() and not valid_utf8(x):
                    raise _NotJSON("has a value with no JSON form")
            elif tx is int or tx is bool or x is None:
                pass
            else:
                v[k] = _json(x, depth + 1)
        return v
    if t is list:
        if depth > _MAXD:
            raise _NotJSON("nested too deeply")
        for i, x in enumerate(v):
            tx = type(x)
            if tx is str:
                if not x.isascii() and not valid_utf8(x):
                    raise _NotJSON("has a value with no JSON form")
            elif tx is int or tx is bool or x is None:
                pass
            else:
                v[i] = _json(x, depth + 1)
        return v
    if t is str:
        if not v.isascii() and not valid_utf8(v):
            raise _NotJSON("has a value with no JSON form")
        return v
    if t is int or t is bool or v is None:
        return v
    if t is float:
        if not math.isfinite(v):
            raise _NotJSON("has a value with no JSON form")
        return v
    if t is _OddMap:
        if not v.str_keys():
            raise _NotJSON("has a value with no JSON form")
        return _json(dict(v.pairs), depth)
    raise _NotJSON("has a value with no JSON form")


def _object(v: Any, fld: str) -> JsonObject:
    """A payload, arguments or schema: a JSON object, or FieldError."""
    if type(v) is not dict and type(v) is not _OddMap:
        raise FieldError(fld, "not a map")
    try:
        return cast(JsonObject, _json(v, 1))
    except _NotJSON as e:
        raise FieldError(fld, e.reason) from None


def _is_uint(v: Any, hi: int = _U64) -> bool:
    return type(v) is int and 0 <= v <= hi


def _is_int(v: Any) -> bool:
    return type(v) is int and -(1 << 63) <= v <= _I64


def _is_count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= _I64


def _map_items(v: Any) -> Optional[Iterable[tuple[Any, Any]]]:
    """The pairs of a decoded map, or None if v is not one."""
    if type(v) is dict or type(v) is _OddMap:
        return v.items()
    return None


def _limits(v: Any) -> Limits:
    items = _map_items(v)
    if items is None:
        raise ValueError
    l = Limits()
    for k, x in items:
        if type(k) is not str:
            raise ValueError
        if k == "max_header" or k == "max_attachment":
            if not _is_uint(x):
                raise ValueError
            setattr(l, k, min(x, _U32))
    return l


def _opt_str(v: Any) -> str:
    if v is None:
        return ""
    if type(v) is not str:
        raise ValueError
    return v


_TYPES = frozenset(("hello", "startup", "ping", "pong", "cancel", "drain", "bye", "invoke", "frame", "end", "tools"))


def decode_header(h: Bytes, att_len: int = 0) -> Packet:
    """Decode header bytes h of a packet whose attachment is att_len bytes
    long. Returns the packet; an inline frame's media data is left empty
    (the caller attaches the bytes). Raises a ProtocolError subclass or
    InvalidPacketError. When att_len > 0 and the frame's media is not
    inline, UnexpectedAttachmentError wins over any other fault."""
    try:
        top = _unpack(h)
    except Exception:
        raise MalformedHeaderError("header is not exactly one MessagePack map") from None
    items: _Items
    if type(top) is dict:
        items = top.items()
    elif type(top) is _OddMap:
        if not top.str_keys():
            raise MalformedHeaderError("header key not a string")
        items = top.pairs
    else:
        raise MalformedHeaderError("header is not a map")
    t = None
    for k, v in items:
        if k == "t":
            if type(v) is not str:
                raise UnknownTypeError("t is not a string")
            t = v
    if t not in _TYPES:
        raise UnknownTypeError("missing or unknown t")
    if t == "frame":
        return _decode_frame(items, att_len)
    if att_len > 0:
        raise UnexpectedAttachmentError(f"attachment on {t}")
    if t == "invoke":
        return _decode_invoke(items)
    if t == "end":
        cid: Any = ""
        for k, v in items:
            if k == "call_id":
                cid = v
        try:
            check_call_id(cid)
        except FieldError as e:
            raise InvalidPacketError("end", None, e) from None
        return StreamEnd(cid)
    try:
        return cast(Packet, _CONTROL[t](items))
    except _Bad as e:
        raise BadFieldError(f"{t}: {e.field}") from None


class _Bad(Exception):
    def __init__(self, fld: str) -> None:
        self.field = fld


def _fields(items: Iterable[tuple[Any, Any]], spec: dict[str, Callable[[Any], Any]], t: str) -> dict[str, Any]:
    """Apply spec {key: reader} to every occurrence; the last wins, and a
    bad occurrence is an error even when a later one is right."""
    out = {}
    for k, v in items:
        r = spec.get(k)
        if r is None:
            continue
        try:
            out[k] = r(v)
        except (ValueError, TypeError, FieldError):
            raise _Bad(k) from None
    return out


def _r_uint(v: Any) -> int:
    if not _is_uint(v):
        raise ValueError
    return int(v)


def _r_count(v: Any) -> int:
    if not _is_count(v):
        raise ValueError
    return int(v)


def _r_int(v: Any) -> int:
    if not _is_int(v):
        raise ValueError
    return int(v)


def _r_str(v: Any) -> str:
    if type(v) is not str:
        raise ValueError
    return v


def _d_ping(items: _Items) -> Ping:
    return Ping(**_fields(items, {"nonce": _r_uint}, "ping"))


def _d_pong(items: _Items) -> Pong:
    return Pong(**_fields(items, {"nonce": _r_uint, "streams": _r_count, "stuck": _r_count}, "pong"))


def _d_cancel(items: _Items) -> Cancel:
    f = _fields(items, {"call_id": _r_str, "reason": _opt_str}, "cancel")
    cid = f.get("call_id", "")
    try:
        check_call_id(cid)
    except FieldError:
        raise _Bad("call_id") from None
    return Cancel(cid, f.get("reason", ""))


def _d_drain(items: _Items) -> Drain:
    return Drain(**_fields(items, {"grace_ms": _r_count}, "drain"))


def _d_bye(items: _Items) -> Bye:
    return Bye(**_fields(items, {"reason": _opt_str}, "bye"))


def _d_startup(items: _Items) -> Startup:
    f = _fields(
        items,
        {
            "protocol": _r_int,
            "child_id": _r_str,
            "limits": _limits,
            "health_interval_ms": _r_count,
            "cancel_grace_ms": _r_count,
            "ingress_queue": _r_count,
            "calls": _r_calls,
            "tools_updates": _r_opt_bool,
        },
        "startup",
    )
    return Startup(protocol=f.pop("protocol", 0), **f)


def _r_calls(v: Any) -> Optional["Calls"]:
    """startup's calls map (docs/protocol.md §3); None when not given."""
    if v is None:
        return None
    items = _map_items(v)
    if items is None:
        raise ValueError
    c = Calls(socket="", max_depth=0, max_in_flight=0)
    for k, x in items:
        if type(k) is not str:
            raise ValueError
        if k == "socket":
            c.socket = _r_str(x)
        elif k == "tools":
            c.tools = [] if x is None else _r_tools(x)
        elif k == "max_depth":
            c.max_depth = _r_int(x)
        elif k == "max_in_flight":
            c.max_in_flight = _r_int(x)
    if not 1 <= len(c.socket.encode("utf-8", "surrogatepass")) <= MAX_SOCKET_PATH or c.max_depth < 1 or c.max_in_flight < 1:
        raise ValueError
    return c


def _r_protocols(v: Any) -> list[int]:
    if type(v) is not list or len(v) > 64:
        raise ValueError
    for x in v:
        if not _is_int(x):
            raise ValueError
    return v


def _r_tools(v: Any) -> list[ToolDescriptor]:
    if type(v) is not list or len(v) > 4096:
        raise ValueError
    out = []
    for td in v:
        items = _map_items(td)
        if items is None:
            raise ValueError
        d = ToolDescriptor(id="")
        for k, x in items:
            if type(k) is not str:
                raise ValueError
            if k == "id":
                d.id = _r_str(x)
            elif k == "version":
                d.version = _opt_str(x)
                check_chars("tools.version", d.version, 0, MAX_TOOL_VERSION_CHARS)
            elif k == "description":
                d.description = _opt_str(x)
            elif k in _SCHEMA_KEYS:
                setattr(d, k, None if x is None else _object(x, k))
        check_call_id(d.id, "tools.id")
        out.append(d)
    return out


def _d_hello(items: _Items) -> Hello:
    f = _fields(
        items,
        {"protocol": _r_protocols, "sdk": _opt_str, "pid": _r_int, "max_streams": _r_int, "limits": _limits, "tools": _r_tools},
        "hello",
    )
    ms = f.get("max_streams", 0)
    if ms < 1:
        raise _Bad("max_streams")
    return Hello(
        protocol=f.get("protocol", []),
        sdk=f.get("sdk", ""),
        pid=f.get("pid", 0),
        max_streams=ms,
        limits=f.get("limits", Limits()),
        tools=f.get("tools", []),
    )


def _r_opt_bool(v: Any) -> bool:
    if v is None:
        return False
    if type(v) is not bool:
        raise ValueError
    return v


def _d_tools(items: _Items) -> Tools:
    f = _fields(items, {"tools": _r_tools}, "tools")
    return Tools(tools=f.get("tools", []))


_CONTROL = {
    "tools": _d_tools,
    "ping": _d_ping,
    "pong": _d_pong,
    "cancel": _d_cancel,
    "drain": _d_drain,
    "bye": _d_bye,
    "startup": _d_startup,
    "hello": _d_hello,
}


def _valid_call_id(v: Any) -> Optional[str]:
    try:
        check_call_id(v)
    except FieldError:
        return None
    return str(v)


def _decode_media(v: Any) -> tuple[Optional[Media], bool, Optional[FieldError]]:
    """(media, inline, error): the last occurrence of each key wins, a nil
    one removes an earlier one, a wrong type is an error whatever follows."""
    items = _map_items(v)
    if items is None:
        return None, False, FieldError("media", "not a map")
    first = None
    vals: dict[str, Any] = {}
    for k, x in items:
        if type(k) is not str:
            first = first or FieldError("media", "key not a string")
            continue
        if x is None:
            vals.pop(k, None)
            continue
        if k in ("kind", "media_type", "codec", "blob_id", "sha256"):
            if type(x) is not str:
                first = first or FieldError("media." + k, "wrong type")
                continue
        elif k in ("sample_rate", "channels", "size_bytes"):
            if not _is_int(x):
                first = first or FieldError("media." + k, "wrong type")
                continue
        elif k in ("timestamp_seconds", "duration_seconds"):
            if type(x) is float or _is_int(x):
                x = float(x)
            else:
                first = first or FieldError("media." + k, "wrong type")
                continue
        elif k == "data":
            first = first or FieldError("media.data", "inline data travels as the attachment")
            continue
        else:
            continue
        vals[k] = x
    kind = vals.get("kind")
    if kind == "inline":
        for k in ("sample_rate", "channels"):
            if k in vals and vals[k] <= 0:
                first = first or FieldError("media." + k, "must be > 0")
        if first:
            return None, True, first
        m = InlineMedia._raw(
            vals.get("media_type", ""),
            vals.get("codec") or None,
            vals.get("sample_rate"),
            vals.get("channels"),
            vals.get("timestamp_seconds"),
            vals.get("duration_seconds"),
        )
        return m, True, None
    if kind == "blob":
        if "size_bytes" not in vals:
            first = first or FieldError("media.size_bytes", "required")
        if "sha256" not in vals:
            first = first or FieldError("media.sha256", "required")
        if first:
            return None, False, first
        return BlobMedia._raw(vals.get("blob_id", ""), vals["size_bytes"], vals["sha256"], vals.get("media_type", "")), False, None
    return None, False, FieldError("media.kind", "unknown value")


def _decode_error(v: Any) -> tuple[Optional[StreamError], Optional[FieldError]]:
    items = _map_items(v)
    if items is None:
        return None, FieldError("error", "not a map")
    code, msg, code_err = None, "", None
    for k, x in items:
        if type(k) is not str:
            return None, FieldError("error", "key not a string")
        if k == "code":
            if type(x) is not str:
                return None, FieldError("error.code", "not a string")
            code = x
            code_err = None if x in _CODES else FieldError("error.code", "unknown value")
        elif k == "message":
            if x is None:
                continue
            if type(x) is not str:
                return None, FieldError("error.message", "not a string")
            msg = x
    if code is None:
        return None, FieldError("error.code", "required")
    if code_err:
        return None, code_err
    return StreamError._raw(cast(ErrorCode, code), msg), None


_CODES = frozenset(ERROR_CODES)


def _decode_frame(items: _Items, att_len: int) -> StreamFrame:
    first: Optional[FieldError] = None
    call_id: Any = ""
    direction: Any = ""
    sequence: Any = 0
    kind: Any = ""
    payload = None
    media = None
    error = None
    inline = False
    media_err = error_err = None
    for k, v in items:
        if k == "call_id":
            if type(v) is not str:
                call_id = ""
                first = first or FieldError("call_id", "not a string")
            else:
                call_id = v
        elif k == "direction":
            if type(v) is not str:
                first = first or FieldError("direction", "not a string")
            else:
                direction = v
        elif k == "sequence":
            if not _is_uint(v):
                first = first or FieldError("sequence", "not a non-negative integer")
            sequence = v
        elif k == "kind":
            if type(v) is not str:
                first = first or FieldError("kind", "not a string")
            else:
                kind = v
        elif k == "synthetic":
            if v is None:
                continue
            if type(v) is not bool:
                first = first or FieldError("synthetic", "not a boolean")
            elif v:
                first = first or FieldError("synthetic", "synthetic frames never travel on the wire")
        elif k == "payload":
            payload = v
        elif k == "media":
            if v is None:
                media, inline, media_err = None, False, None
            else:
                media, inline, media_err = _decode_media(v)
        elif k == "error":
            if v is None:
                error, error_err = None, None
            else:
                error, error_err = _decode_error(v)
    if att_len > 0 and not inline:
        raise UnexpectedAttachmentError("attachment on a frame without inline media")
    first = first or media_err or error_err
    if first is None and payload is not None:
        try:
            payload = _object(payload, "payload")
        except FieldError as e:
            first = e
    if first is None:
        f = StreamFrame._trusted(call_id, direction, sequence, kind, payload, media, error)
        try:
            f.check_fields(check_payload=False)
            return f
        except FieldError as e:
            first = e
    raise InvalidPacketError("frame", _valid_call_id(call_id), first)


def _decode_invoke(items: _Items) -> StreamInvoke:
    first: Optional[FieldError] = None
    vals: dict[str, Any] = {"call_id": "", "tool_id": "", "timeout_ms": 0, "trace": None, "tree": "", "parent": "", "depth": 0, "detached": False}
    has_args = False
    args = None
    for k, v in items:
        try:
            if k == "call_id":
                vals["call_id"] = v if type(v) is str else ""
                if type(v) is not str:
                    raise ValueError
            elif k == "tool_id":
                vals["tool_id"] = _r_str(v)
            elif k == "arguments":
                has_args, args = True, v
            elif k == "timeout_ms":
                vals["timeout_ms"] = 0 if v is None else _r_int(v)
            elif k in ("tree", "parent"):
                vals[k] = _opt_str(v)
            elif k == "depth":
                vals["depth"] = 0 if v is None else _r_int(v)
            elif k == "detached":
                if v is not None and type(v) is not bool:
                    raise ValueError
                vals["detached"] = bool(v)
            elif k == "trace":
                if v is None:
                    vals["trace"] = None
                    continue
                tm = _map_items(v)
                if tm is None:
                    raise ValueError
                d = {}
                for tk, tv in tm:
                    if type(tk) is not str or type(tv) is not str:
                        raise ValueError
                    d[tk] = tv
                vals["trace"] = d
        except ValueError:
            first = first or FieldError(k, "wrong type")
    if not has_args or args is None:
        first = first or FieldError("arguments", "required")
    elif first is None:
        try:
            args = _object(args, "arguments")
        except FieldError as e:
            first = e
    inv = StreamInvoke(
        vals["call_id"], vals["tool_id"], args if type(args) is dict else {}, vals["timeout_ms"], vals["trace"], vals["tree"], vals["parent"], vals["depth"], vals["detached"]
    )
    if first is None:
        try:
            check_call_id(inv.call_id)
            check_call_id(inv.tool_id, "tool_id")
            if inv.timeout_ms < 0:
                raise FieldError("timeout_ms", "must be >= 0")
            if inv.tree:
                check_call_id(inv.tree, "tree")
            if inv.parent:
                check_call_id(inv.parent, "parent")
            if inv.depth < 0:
                raise FieldError("depth", "must be >= 0")
        except FieldError as e:
            first = e
    if first is not None:
        raise InvalidPacketError("invoke", _valid_call_id(vals["call_id"]), first)
    return inv


def _attach(p: Packet, data: Bytes) -> None:
    """Give a decoded inline frame its attachment (decode_header refuses an
    attachment on anything else)."""
    if type(p) is not StreamFrame or type(p.media) is not InlineMedia:
        raise UnexpectedAttachmentError("attachment on a packet without inline media")
    p.media.data = data


def check_lengths(h: int, a: int, limits: Limits) -> None:
    """Refuse H = 0, H > max_header or A > max_attachment (limits made
    effective), before anything else is read."""
    l = limits.effective()
    if h == 0 or h > l.max_header:
        raise HeaderLengthError(f"header length {h}, limit {l.max_header}")
    if a > l.max_attachment:
        raise AttachmentLengthError(f"attachment length {a}, limit {l.max_attachment}")


def decode_packet(b: Bytes, limits: Optional[Limits] = None) -> Packet:
    """Decode one whole packet held in b (prefix, header, attachment and
    nothing after). For tests and tools; connections read packets with
    read_packet or the SDK's own reader."""
    if len(b) < PREFIX_LEN:
        raise MalformedHeaderError("packet shorter than its prefix")
    h, a = _prefix.unpack_from(b)
    check_lengths(h, a, limits or Limits())
    if len(b) != PREFIX_LEN + h + a:
        raise MalformedHeaderError("packet length does not match its prefix")
    p = decode_header(memoryview(b)[PREFIX_LEN : PREFIX_LEN + h], a)
    if a:
        _attach(p, bytes(b[PREFIX_LEN + h :]))
    return p


# ---------- asyncio streams ----------


async def read_packet(reader: asyncio.StreamReader, limits: Optional[Limits] = None) -> Packet:
    """Read one packet from reader. Lengths are checked against limits
    before anything else is read; the attachment is read raw (never
    base64) into the inline media's data. An invalid frame's attachment is
    read and dropped before InvalidPacketError is raised, so the stream
    stays in step. EOF at a packet boundary raises ConnectionClosed, in
    the middle of one IncompletePacketError."""
    try:
        pre = await reader.readexactly(PREFIX_LEN)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise IncompletePacketError("connection ended inside a packet prefix") from None
        raise ConnectionClosed("connection closed") from None
    h, a = _prefix.unpack(pre)
    check_lengths(h, a, limits or Limits())
    try:
        hb = await reader.readexactly(h)
        try:
            p = decode_header(hb, a)
        except InvalidPacketError:
            if a:
                await reader.readexactly(a)
            raise
        if a:
            _attach(p, await reader.readexactly(a))
    except asyncio.IncompleteReadError:
        raise IncompletePacketError("connection ended inside a packet") from None
    return p


async def write_packet(writer: asyncio.StreamWriter, frame: Packet, limits: Optional[Limits] = None) -> None:
    """Write one packet (checked first) and its raw attachment, awaiting
    the socket's backpressure (writer.drain). The SDK's own child writes
    with one vectored write and no copy of the attachment; a
    StreamWriter may copy what the socket does not take at once."""
    head, att = encode_packet(frame, limits)
    writer.write(head)
    if len(att):
        writer.write(att)
    await writer.drain()
