"""Frames and their rules (docs/protocol.md §3 and §4), as the streams API's
models: StreamError, InlineMedia, BlobMedia, StreamFrame, StreamEnd.

Every model checks its fields when it is constructed (and when built
with ``from_dict``), raising :class:`skulk.FieldError` naming the field
and the rule, never the value. Like a pydantic model, an attribute set
after construction is not checked again; ``lifecycle_shape()`` checks a
frame whole, and the public encoder checks what it writes.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, Mapping, Optional, Union

from .errors import ErrorCode, FieldError

__all__ = [
    "CALLER_TO_PROVIDER",
    "PROVIDER_TO_CALLER",
    "DIRECTIONS",
    "KINDS",
    "TERMINAL_KINDS",
    "ERROR_CODES",
    "MAX_CALL_ID_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_MEDIA_TYPE_CHARS",
    "MAX_DEPTH",
    "Direction",
    "FrameKind",
    "ErrorCode",
    "JsonValue",
    "JsonObject",
    "Bytes",
    "StreamError",
    "InlineMedia",
    "BlobMedia",
    "Media",
    "StreamFrame",
    "StreamEnd",
    "StreamPacket",
    "sanitize_message",
    "check_call_id",
    "check_object",
]

#: A frame's direction.
Direction = Literal["caller_to_provider", "provider_to_caller"]
#: A frame's kind: started, chunk, then one terminal.
FrameKind = Literal["started", "chunk", "completed", "failed", "cancelled"]
#: A JSON value: what a payload holds.
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]
#: A JSON object: a payload, a tool's arguments, a schema.
JsonObject = dict[str, JsonValue]
#: What inline media's data may be: written without a copy.
Bytes = Union[bytes, bytearray, memoryview]

CALLER_TO_PROVIDER: Direction = "caller_to_provider"
PROVIDER_TO_CALLER: Direction = "provider_to_caller"
DIRECTIONS: tuple[Direction, Direction] = (CALLER_TO_PROVIDER, PROVIDER_TO_CALLER)
KINDS: tuple[FrameKind, ...] = ("started", "chunk", "completed", "failed", "cancelled")
TERMINAL_KINDS = frozenset(("completed", "failed", "cancelled"))
ERROR_CODES: tuple[ErrorCode, ...] = ("provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame")

MAX_CALL_ID_CHARS = 128
MAX_MESSAGE_CHARS = 2048
MAX_MEDIA_TYPE_CHARS = 256
MAX_DEPTH = 64  # maps and arrays in a JSON object; the outermost map is depth 1

_SHA256 = re.compile(r"[a-f0-9]{64}")
_SURROGATES = re.compile(r"[\ud800-\udfff]+")


def valid_utf8(s: str) -> bool:
    """Whether s came from (or encodes to) valid UTF-8. The decoder maps
    invalid bytes to lone surrogates (surrogateescape), which UTF-8 cannot
    encode."""
    return s.isascii() or _SURROGATES.search(s) is None


def check_chars(fld: str, s: object, lo: int, hi: Optional[int]) -> None:
    """Check that s is a str of valid UTF-8 with lo..hi characters."""
    if type(s) is not str:
        raise FieldError(fld, "not a string")
    if not (s.isascii() or _SURROGATES.search(s) is None):
        raise FieldError(fld, "not valid UTF-8")
    if len(s) < lo:
        raise FieldError(fld, "empty")
    if hi is not None and len(s) > hi:
        raise FieldError(fld, "too long")


def check_call_id(call_id: object, fld: str = "call_id") -> None:
    """Check a call id (and any id following its rule): 1..128 characters
    of valid UTF-8."""
    if type(call_id) is str and 0 < len(call_id) <= MAX_CALL_ID_CHARS and call_id.isascii():
        return
    check_chars(fld, call_id, 1, MAX_CALL_ID_CHARS)


def sanitize_message(message: str) -> str:
    """Make message fit for the wire: each run of invalid UTF-8 (lone
    surrogates) becomes one U+FFFD, and the text is cut to 2,048
    characters."""
    if not message.isascii():
        message = _SURROGATES.sub("\ufffd", message)
    return message[:MAX_MESSAGE_CHARS]


class _TooDeep(Exception):
    pass


def _json_ok(v: object, depth: int) -> bool:
    # Exact type checks (a str subclass may encode differently), so the
    # narrowing is by isinstance after the type() test.
    t = type(v)
    if t is str and isinstance(v, str):
        return v.isascii() or _SURROGATES.search(v) is None
    if t is int or t is bool or v is None:
        return True
    if t is float and isinstance(v, float):
        return math.isfinite(v)
    if t is dict and isinstance(v, dict):
        if depth >= MAX_DEPTH:
            raise _TooDeep
        for k, x in v.items():
            if type(k) is not str or not (k.isascii() or _SURROGATES.search(k) is None):
                return False
            tx = type(x)
            if tx is int or (tx is str and x.isascii()) or x is None or tx is bool:
                continue
            if not _json_ok(x, depth + 1):
                return False
        return True
    if (t is list or t is tuple) and isinstance(v, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise _TooDeep
        for x in v:
            if not _json_ok(x, depth + 1):
                return False
        return True
    return False


def check_object(v: object, fld: str = "payload") -> None:
    """Check that v is a JSON object (§4.3): a dict with str keys whose
    values are None, bool, int, finite float, str of valid UTF-8, and
    lists and dicts of the same, nested at most 64 deep."""
    if type(v) is not dict:
        raise FieldError(fld, "not a map")
    # The common flat object of ASCII keys and ints, short strings, bools
    # and nulls is checked here; anything else takes the full walk.
    for k, x in v.items():
        tx = type(x)
        if type(k) is not str or not k.isascii() or not (tx is int or (tx is str and x.isascii()) or x is None or tx is bool):
            break
    else:
        return
    try:
        ok = _json_ok(v, 0)
    except (_TooDeep, RecursionError):
        raise FieldError(fld, "nested too deeply") from None
    if not ok:
        raise FieldError(fld, "has a value with no JSON form")


def _opt_num(fld: str, v: object, positive: bool) -> None:
    """None, or an int > 0 (positive), or a finite number >= 0."""
    if v is None:
        return
    if positive:
        if type(v) is not int:
            raise FieldError(fld, "not an integer")
        if v <= 0:
            raise FieldError(fld, "must be > 0")
        return
    if type(v) is not int and type(v) is not float:
        raise FieldError(fld, "not a number")
    if not math.isfinite(v):
        raise FieldError(fld, "must be finite")
    if v < 0:
        raise FieldError(fld, "must be >= 0")


def _mapping(d: object, fld: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise FieldError(fld, "not a map")
    return d


def _required(d: Mapping[str, Any], key: str, fld: str) -> Any:
    if key not in d:
        raise FieldError(fld, "required")
    return d[key]


class StreamError:
    """Sanitized machine-readable terminal outcome of a failed or
    cancelled frame. ``code`` is one of :data:`ERROR_CODES`; ``message``
    is valid UTF-8 of at most 2,048 characters (``sanitize_message`` makes
    any text fit), never a secret."""

    __slots__ = ("code", "message")

    code: ErrorCode
    message: str

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        if code not in ERROR_CODES:
            raise FieldError("error.code", "unknown value")
        check_chars("error.message", message, 0, MAX_MESSAGE_CHARS)
        self.code = code
        self.message = message

    @classmethod
    def _raw(cls, code: ErrorCode, message: str) -> StreamError:
        """An error not checked (yet): for the decoder, which checks the
        frame whole."""
        e = object.__new__(cls)
        e.code = code
        e.message = message
        return e

    def check(self) -> None:
        """Raise FieldError if a field breaks its rule (after a change)."""
        StreamError(self.code, self.message)

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON-shaped dict, the wire's ``error`` map."""
        return {"code": self.code, "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StreamError:
        """The error a ``to_dict`` (or a frame header's ``error`` map)
        describes; ``message`` may be left out."""
        d = _mapping(d, "error")
        return cls(_required(d, "code", "error.code"), d.get("message", ""))

    def __eq__(self, other: object) -> bool:
        return type(other) is StreamError and other.code == self.code and other.message == self.message

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StreamError(code={self.code!r}, message={self.message!r})"


class InlineMedia:
    """Raw media plus format metadata. ``data`` travels as the packet's
    attachment, never inside the header and never as base64: writing
    takes any bytes-like object and does not copy it; reading gives bytes
    (or, above 64 KiB, the bytearray it was received into).

    ``kind`` is always "inline" (a keyword, as the streams API has it);
    ``media_type`` 1..256 characters; ``sample_rate`` and ``channels``
    None or > 0; ``timestamp_seconds`` and ``duration_seconds`` None or a
    finite number >= 0."""

    __slots__ = ("data", "media_type", "codec", "sample_rate", "channels", "timestamp_seconds", "duration_seconds")

    kind: Literal["inline"] = "inline"
    data: Bytes
    media_type: str
    codec: Optional[str]
    sample_rate: Optional[int]
    channels: Optional[int]
    timestamp_seconds: Optional[float]
    duration_seconds: Optional[float]

    def __init__(
        self,
        data: Bytes,
        media_type: str,
        codec: Optional[str] = None,
        sample_rate: Optional[int] = None,
        channels: Optional[int] = None,
        timestamp_seconds: Optional[float] = None,
        duration_seconds: Optional[float] = None,
        *,
        kind: Literal["inline"] = "inline",
    ) -> None:
        if kind != "inline":
            raise FieldError("media.kind", "must be inline")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise FieldError("media.data", "not bytes")
        check_chars("media.media_type", media_type, 1, MAX_MEDIA_TYPE_CHARS)
        if codec is not None:
            check_chars("media.codec", codec, 0, None)
        _opt_num("media.sample_rate", sample_rate, True)
        _opt_num("media.channels", channels, True)
        _opt_num("media.timestamp_seconds", timestamp_seconds, False)
        _opt_num("media.duration_seconds", duration_seconds, False)
        self.data = data
        self.media_type = media_type
        self.codec = codec
        self.sample_rate = sample_rate
        self.channels = channels
        self.timestamp_seconds = timestamp_seconds
        self.duration_seconds = duration_seconds

    @classmethod
    def _raw(cls, media_type: str, codec: Optional[str], sample_rate: Optional[int], channels: Optional[int],
             timestamp_seconds: Optional[float], duration_seconds: Optional[float]) -> InlineMedia:
        """Media not checked (yet), with no data: for the decoder, which
        checks the frame whole and attaches the data."""
        m = object.__new__(cls)
        m.data = b""
        m.media_type = media_type
        m.codec = codec
        m.sample_rate = sample_rate
        m.channels = channels
        m.timestamp_seconds = timestamp_seconds
        m.duration_seconds = duration_seconds
        return m

    def check(self) -> None:
        """Raise FieldError if a field breaks its rule (after a change)."""
        InlineMedia(self.data, self.media_type, self.codec, self.sample_rate, self.channels,
                    self.timestamp_seconds, self.duration_seconds)

    def to_dict(self) -> dict[str, Any]:
        """The media as a dict of the streams API's fields, ``data`` as
        the bytes-like object itself (never base64)."""
        return {"kind": "inline", "data": self.data, "media_type": self.media_type, "codec": self.codec,
                "sample_rate": self.sample_rate, "channels": self.channels,
                "timestamp_seconds": self.timestamp_seconds, "duration_seconds": self.duration_seconds}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InlineMedia:
        """The media a ``to_dict`` describes (``kind`` may be left out)."""
        d = _mapping(d, "media")
        return cls(
            _required(d, "data", "media.data"),
            _required(d, "media_type", "media.media_type"),
            d.get("codec"),
            d.get("sample_rate"),
            d.get("channels"),
            d.get("timestamp_seconds"),
            d.get("duration_seconds"),
            kind=d.get("kind", "inline"),
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not InlineMedia:
            return False
        return all(getattr(self, k) == getattr(other, k) for k in InlineMedia.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"InlineMedia(data=<{len(self.data)} bytes>, media_type={self.media_type!r})"


class BlobMedia:
    """An opaque, immutable blob reference: Skulk passes it on and never
    resolves it. ``kind`` is always "blob"; ``blob_id`` and
    ``media_type`` non-empty; ``size_bytes`` >= 0; ``sha256`` 64
    lower-case hex digits."""

    __slots__ = ("blob_id", "size_bytes", "sha256", "media_type")

    kind: Literal["blob"] = "blob"
    blob_id: str
    size_bytes: int
    sha256: str
    media_type: str

    def __init__(self, blob_id: str, size_bytes: int, sha256: str, media_type: str, *, kind: Literal["blob"] = "blob") -> None:
        if kind != "blob":
            raise FieldError("media.kind", "must be blob")
        check_chars("media.blob_id", blob_id, 1, None)
        if type(size_bytes) is not int:
            raise FieldError("media.size_bytes", "not an integer")
        if size_bytes < 0:
            raise FieldError("media.size_bytes", "must be >= 0")
        if type(sha256) is not str or not _SHA256.fullmatch(sha256):
            raise FieldError("media.sha256", "must be 64 lowercase hex digits")
        check_chars("media.media_type", media_type, 1, None)
        self.blob_id = blob_id
        self.size_bytes = size_bytes
        self.sha256 = sha256
        self.media_type = media_type

    @classmethod
    def _raw(cls, blob_id: str, size_bytes: int, sha256: str, media_type: str) -> BlobMedia:
        """A reference not checked (yet): for the decoder."""
        m = object.__new__(cls)
        m.blob_id = blob_id
        m.size_bytes = size_bytes
        m.sha256 = sha256
        m.media_type = media_type
        return m

    def check(self) -> None:
        """Raise FieldError if a field breaks its rule (after a change)."""
        BlobMedia(self.blob_id, self.size_bytes, self.sha256, self.media_type)

    def to_dict(self) -> dict[str, Any]:
        """The reference as a JSON-shaped dict (the wire's ``media`` map)."""
        return {"kind": "blob", "blob_id": self.blob_id, "size_bytes": self.size_bytes, "sha256": self.sha256,
                "media_type": self.media_type}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BlobMedia:
        """The reference a ``to_dict`` describes (``kind`` may be left out)."""
        d = _mapping(d, "media")
        return cls(
            _required(d, "blob_id", "media.blob_id"),
            _required(d, "size_bytes", "media.size_bytes"),
            _required(d, "sha256", "media.sha256"),
            _required(d, "media_type", "media.media_type"),
            kind=d.get("kind", "blob"),
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not BlobMedia:
            return False
        return all(getattr(self, k) == getattr(other, k) for k in BlobMedia.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"BlobMedia(blob_id={self.blob_id!r}, size_bytes={self.size_bytes}, sha256={self.sha256!r}, "
                f"media_type={self.media_type!r})")


#: A frame's media, told apart by its ``kind``.
Media = Union[InlineMedia, BlobMedia]


def media_from_dict(d: Mapping[str, Any]) -> Media:
    """InlineMedia or BlobMedia, by the dict's ``kind`` (the
    discriminator)."""
    d = _mapping(d, "media")
    kind = d.get("kind")
    if kind == "inline":
        return InlineMedia.from_dict(d)
    if kind == "blob":
        return BlobMedia.from_dict(d)
    raise FieldError("media.kind", "required" if kind is None else "unknown value")


class StreamFrame:
    """One sequenced input or output frame of one direction of one call.

    Constructing one checks every field and the lifecycle shape of §4.1
    (``lifecycle_shape``): ``call_id`` 1..128 characters, ``sequence`` >= 0
    and 0 exactly on started, ``synthetic`` False (synthetic frames never
    travel on the wire), ``payload`` a JSON object, a chunk with a payload
    or media, a failed frame with an error other than cancelled, and so
    on. A handler builds its frames with ``call.chunk``,
    ``call.completed`` and ``call.failed`` rather than by hand."""

    __slots__ = ("call_id", "direction", "sequence", "kind", "payload", "media", "error")

    call_id: str
    direction: Direction
    sequence: int
    kind: FrameKind
    payload: Optional[JsonObject]
    media: Optional[Media]
    error: Optional[StreamError]
    synthetic: Literal[False] = False

    def __init__(
        self,
        call_id: str,
        direction: Direction,
        sequence: int,
        kind: FrameKind,
        payload: Optional[JsonObject] = None,
        media: Optional[Media] = None,
        error: Optional[StreamError] = None,
        synthetic: Literal[False] = False,
    ) -> None:
        if synthetic is not False:
            raise FieldError("synthetic", "synthetic frames never travel on the wire")
        self.call_id = call_id
        self.direction = direction
        self.sequence = sequence
        self.kind = kind
        self.payload = payload
        self.media = media
        self.error = error
        self.check_fields(check_payload=True)

    @classmethod
    def _trusted(
        cls,
        call_id: str,
        direction: Direction,
        sequence: int,
        kind: FrameKind,
        payload: Optional[JsonObject] = None,
        media: Optional[Media] = None,
        error: Optional[StreamError] = None,
    ) -> StreamFrame:
        """A frame whose fields the SDK has checked already (its decoder,
        its builders): nothing is checked again."""
        f = object.__new__(cls)
        f.call_id = call_id
        f.direction = direction
        f.sequence = sequence
        f.kind = kind
        f.payload = payload
        f.media = media
        f.error = error
        return f

    def is_terminal(self) -> bool:
        """Whether this frame closes its own direction (completed, failed
        or cancelled)."""
        return self.kind in TERMINAL_KINDS

    def lifecycle_shape(self) -> StreamFrame:
        """Check every field and the lifecycle shape of §4.1 again; return
        self, or raise FieldError naming the first field at fault."""
        self.check_fields(check_payload=True)
        return self

    def check_fields(self, check_payload: bool) -> None:
        """lifecycle_shape, optionally without walking the payload (for a
        decoder that has walked it already)."""
        check_call_id(self.call_id)
        if self.direction not in DIRECTIONS:
            raise FieldError("direction", "unknown value")
        kind = self.kind
        if kind not in KINDS:
            raise FieldError("kind", "unknown value")
        seq = self.sequence
        if type(seq) is not int or seq < 0 or seq >= 1 << 64:
            raise FieldError("sequence", "not a non-negative integer")
        if (seq == 0) != (kind == "started"):
            raise FieldError("sequence", "must be 0 exactly when kind is started")
        payload, media, error = self.payload, self.media, self.error
        if payload is not None and check_payload:
            check_object(payload)
        if media is not None:
            if type(media) is not InlineMedia and type(media) is not BlobMedia:
                raise FieldError("media", "not inline or blob media")
            media.check()
        if error is not None:
            if type(error) is not StreamError:
                raise FieldError("error", "not a StreamError")
            error.check()
        has_p, has_m = payload is not None, media is not None
        if kind == "started":
            if has_p:
                raise FieldError("payload", "not allowed on started")
            if has_m:
                raise FieldError("media", "not allowed on started")
            if error is not None:
                raise FieldError("error", "not allowed on started")
        elif kind == "chunk":
            if not has_p and not has_m:
                raise FieldError("payload", "chunk needs a payload or media")
            if error is not None:
                raise FieldError("error", "not allowed on chunk")
        elif kind == "completed":
            if has_m:
                raise FieldError("media", "not allowed on completed")
            if error is not None:
                raise FieldError("error", "not allowed on completed")
        elif kind == "failed":
            if has_p:
                raise FieldError("payload", "not allowed on failed")
            if has_m:
                raise FieldError("media", "not allowed on failed")
            if error is None:
                raise FieldError("error", "required on failed")
            if error.code == "cancelled":
                raise FieldError("error.code", "failed must not carry cancelled")
        else:  # cancelled
            if has_p:
                raise FieldError("payload", "not allowed on cancelled")
            if has_m:
                raise FieldError("media", "not allowed on cancelled")
            if error is not None and error.code != "cancelled":
                raise FieldError("error.code", "cancelled must carry cancelled")

    def to_dict(self) -> dict[str, Any]:
        """The frame as a dict of the streams API's fields: media and error
        as their own ``to_dict``, None where absent; inline media's data
        stays bytes."""
        return {
            "call_id": self.call_id,
            "direction": self.direction,
            "sequence": self.sequence,
            "kind": self.kind,
            "synthetic": False,
            "payload": self.payload,
            "media": None if self.media is None else self.media.to_dict(),
            "error": None if self.error is None else self.error.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StreamFrame:
        """The frame a ``to_dict`` (or a JSON rendering of one, without
        inline data) describes, checked as the constructor checks it:
        ``call_id``, ``direction``, ``sequence`` and ``kind`` are required,
        the rest default to None (``synthetic`` to False)."""
        d = _mapping(d, "frame")
        media = d.get("media")
        error = d.get("error")
        return cls(
            _required(d, "call_id", "call_id"),
            _required(d, "direction", "direction"),
            _required(d, "sequence", "sequence"),
            _required(d, "kind", "kind"),
            d.get("payload"),
            None if media is None else (media if isinstance(media, (InlineMedia, BlobMedia)) else media_from_dict(media)),
            None if error is None else (error if isinstance(error, StreamError) else StreamError.from_dict(error)),
            d.get("synthetic", False),
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not StreamFrame:
            return False
        return all(getattr(self, k) == getattr(other, k) for k in StreamFrame.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = ""
        if self.payload is not None:
            extra += f", payload={self.payload!r}"
        if self.media is not None:
            extra += f", media={self.media!r}"
        if self.error is not None:
            extra += f", error={self.error!r}"
        return f"StreamFrame(call_id={self.call_id!r}, direction={self.direction!r}, sequence={self.sequence}, kind={self.kind!r}{extra})"


class StreamEnd:
    """The child's cleanup acknowledgment: sent once per call, after
    exactly one provider terminal, once the handler has returned.
    ``kind`` is always "end"; ``call_id`` 1..128 characters."""

    __slots__ = ("call_id",)

    kind: Literal["end"] = "end"
    call_id: str

    def __init__(self, call_id: str, *, kind: Literal["end"] = "end") -> None:
        if kind != "end":
            raise FieldError("kind", "must be end")
        check_call_id(call_id)
        self.call_id = call_id

    def to_dict(self) -> dict[str, Any]:
        """The end as a JSON-shaped dict."""
        return {"kind": "end", "call_id": self.call_id}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StreamEnd:
        """The end a ``to_dict`` describes (``kind`` may be left out)."""
        d = _mapping(d, "end")
        return cls(_required(d, "call_id", "call_id"), kind=d.get("kind", "end"))

    def __eq__(self, other: object) -> bool:
        return type(other) is StreamEnd and other.call_id == self.call_id

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StreamEnd(call_id={self.call_id!r})"


#: What a stream connection carries after its invoke: frames and the end.
StreamPacket = Union[StreamFrame, StreamEnd]


def packet_from_dict(d: Mapping[str, Any]) -> StreamPacket:
    """A StreamEnd when ``kind`` is "end", else a StreamFrame."""
    d = _mapping(d, "packet")
    if d.get("kind") == "end":
        return StreamEnd.from_dict(d)
    return StreamFrame.from_dict(d)
