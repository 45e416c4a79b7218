"""Frames and their rules (docs/protocol.md §3 and §4).

A frame is checked when it is built by the SDK's helpers, before it is
written and again when it is read. Errors name the field and the rule and
never the value, so they are safe to log and to send to a peer.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

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
    "FieldError",
    "StreamError",
    "InlineMedia",
    "BlobMedia",
    "StreamFrame",
    "StreamEnd",
    "sanitize_message",
    "check_call_id",
    "check_object",
]

CALLER_TO_PROVIDER = "caller_to_provider"
PROVIDER_TO_CALLER = "provider_to_caller"
DIRECTIONS = (CALLER_TO_PROVIDER, PROVIDER_TO_CALLER)
KINDS = ("started", "chunk", "completed", "failed", "cancelled")
TERMINAL_KINDS = frozenset(("completed", "failed", "cancelled"))
ERROR_CODES = ("provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame")

MAX_CALL_ID_CHARS = 128
MAX_MESSAGE_CHARS = 2048
MAX_MEDIA_TYPE_CHARS = 256
MAX_DEPTH = 64  # maps and arrays in a JSON object; the outermost map is depth 1

_SHA256 = re.compile(r"[a-f0-9]{64}")
_SURROGATES = re.compile(r"[\ud800-\udfff]+")


class FieldError(ValueError):
    """A field that breaks a rule of §3/§4: ``field`` is the wire name
    (dotted for nested ones, e.g. ``media.sample_rate``), ``reason`` the
    rule. The message never includes the field's value."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def valid_utf8(s: str) -> bool:
    """Whether s came from (or encodes to) valid UTF-8. The decoder maps
    invalid bytes to lone surrogates (surrogateescape), which UTF-8 cannot
    encode."""
    return s.isascii() or _SURROGATES.search(s) is None


def check_chars(fld: str, s: Any, lo: int, hi: Optional[int]) -> None:
    """Check that s is a str of valid UTF-8 with lo..hi characters."""
    if type(s) is not str:
        raise FieldError(fld, "not a string")
    if not valid_utf8(s):
        raise FieldError(fld, "not valid UTF-8")
    if len(s) < lo:
        raise FieldError(fld, "empty")
    if hi is not None and len(s) > hi:
        raise FieldError(fld, "too long")


def check_call_id(call_id: Any, fld: str = "call_id") -> None:
    """Check a call id (and any id following its rule): 1..128 characters
    of valid UTF-8."""
    check_chars(fld, call_id, 1, MAX_CALL_ID_CHARS)


def sanitize_message(message: str) -> str:
    """Make message fit for the wire: each run of invalid UTF-8 (lone
    surrogates) becomes one U+FFFD, and the text is cut to 2,048
    characters."""
    if not message.isascii():
        message = _SURROGATES.sub("\ufffd", message)
    return message[:MAX_MESSAGE_CHARS]


def _check_value(v: Any, depth: int) -> bool:
    t = type(v)
    if t is str:
        return v.isascii() or _SURROGATES.search(v) is None
    if t is int or t is bool or v is None:
        return True
    if t is float:
        return math.isfinite(v)
    if t is dict:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        for k, x in v.items():
            if type(k) is not str or not (k.isascii() or _SURROGATES.search(k) is None):
                return False
            if not _check_value(x, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise _TooDeep
        for x in v:
            if not _check_value(x, depth + 1):
                return False
        return True
    return False


class _TooDeep(Exception):
    pass


def check_object(v: Any, fld: str = "payload") -> None:
    """Check that v is a JSON object (§4.3): a dict with str keys whose
    values are None, bool, int, finite float, str of valid UTF-8, and
    lists and dicts of the same, nested at most 64 deep."""
    if type(v) is not dict:
        raise FieldError(fld, "not a map")
    try:
        ok = _check_value(v, 0)
    except _TooDeep:
        raise FieldError(fld, "nested too deeply") from None
    except RecursionError:
        raise FieldError(fld, "nested too deeply") from None
    if not ok:
        raise FieldError(fld, "has a value with no JSON form")


@dataclass
class StreamError:
    """Sanitized machine-readable terminal outcome of a failed or
    cancelled frame."""

    code: Literal["provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame"]
    message: str = ""

    def check(self) -> None:
        """Raise FieldError if the code is unknown or the message breaks
        its rule (valid UTF-8, at most 2,048 characters)."""
        if self.code not in ERROR_CODES:
            raise FieldError("error.code", "unknown value")
        check_chars("error.message", self.message, 0, MAX_MESSAGE_CHARS)


@dataclass
class InlineMedia:
    """Raw media plus format metadata. ``data`` travels as the packet's
    attachment, never inside the header and never as base64. Reading
    gives bytes (or, above 64 KiB, the bytearray it was received into);
    writing takes any bytes-like object and does not copy it."""

    data: Union[bytes, bytearray, memoryview]
    media_type: str
    codec: Optional[str] = None
    sample_rate: Optional[int] = None
    channels: Optional[int] = None
    timestamp_seconds: Optional[float] = None
    duration_seconds: Optional[float] = None
    kind: Literal["inline"] = field(default="inline", init=False)

    def check(self) -> None:
        """Raise FieldError if a field breaks its rule."""
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise FieldError("media.data", "not bytes")
        check_chars("media.media_type", self.media_type, 1, MAX_MEDIA_TYPE_CHARS)
        if self.codec is not None:
            check_chars("media.codec", self.codec, 0, None)
        for name in ("sample_rate", "channels"):
            v = getattr(self, name)
            if v is not None and (type(v) is not int or v <= 0):
                raise FieldError("media." + name, "must be > 0")
        for name in ("timestamp_seconds", "duration_seconds"):
            v = getattr(self, name)
            if v is None:
                continue
            if type(v) not in (int, float):
                raise FieldError("media." + name, "wrong type")
            if not math.isfinite(v):
                raise FieldError("media." + name, "must be finite")
            if v < 0:
                raise FieldError("media." + name, "must be >= 0")


@dataclass
class BlobMedia:
    """An opaque, immutable blob reference: Skulk passes it on and never
    resolves it."""

    blob_id: str
    size_bytes: int
    sha256: str
    media_type: str
    kind: Literal["blob"] = field(default="blob", init=False)

    def check(self) -> None:
        """Raise FieldError if a field breaks its rule."""
        check_chars("media.blob_id", self.blob_id, 1, None)
        if type(self.size_bytes) is not int or self.size_bytes < 0:
            raise FieldError("media.size_bytes", "must be >= 0")
        if type(self.sha256) is not str or not _SHA256.fullmatch(self.sha256):
            raise FieldError("media.sha256", "must be 64 lowercase hex digits")
        check_chars("media.media_type", self.media_type, 1, None)


Media = Union[InlineMedia, BlobMedia]


@dataclass
class StreamFrame:
    """One sequenced input or output frame of one direction of one call."""

    call_id: str
    direction: Literal["caller_to_provider", "provider_to_caller"]
    sequence: int
    kind: Literal["started", "chunk", "completed", "failed", "cancelled"]
    payload: Optional[dict] = None
    media: Optional[Media] = None
    error: Optional[StreamError] = None
    synthetic: Literal[False] = False

    def is_terminal(self) -> bool:
        """Whether this frame closes its own direction (completed, failed
        or cancelled)."""
        return self.kind in TERMINAL_KINDS

    def lifecycle_shape(self) -> "StreamFrame":
        """Check every field and the lifecycle shape of §4.1; return self,
        or raise FieldError naming the first field at fault. A synthetic
        frame never travels on the wire, so it is refused here too."""
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
        if self.synthetic is not False:
            raise FieldError("synthetic", "synthetic frames never travel on the wire")
        payload, media, error = self.payload, self.media, self.error
        if payload is not None and check_payload:
            check_object(payload)
        if media is not None:
            if not isinstance(media, (InlineMedia, BlobMedia)):
                raise FieldError("media", "not inline or blob media")
            media.check()
        if error is not None:
            if not isinstance(error, StreamError):
                raise FieldError("error", "not a StreamError")
            error.check()
        has_p, has_m, has_e = payload is not None, media is not None, error is not None
        if kind == "started":
            if has_p:
                raise FieldError("payload", "not allowed on started")
            if has_m:
                raise FieldError("media", "not allowed on started")
            if has_e:
                raise FieldError("error", "not allowed on started")
        elif kind == "chunk":
            if not has_p and not has_m:
                raise FieldError("payload", "chunk needs a payload or media")
            if has_e:
                raise FieldError("error", "not allowed on chunk")
        elif kind == "completed":
            if has_m:
                raise FieldError("media", "not allowed on completed")
            if has_e:
                raise FieldError("error", "not allowed on completed")
        elif kind == "failed":
            if has_p:
                raise FieldError("payload", "not allowed on failed")
            if has_m:
                raise FieldError("media", "not allowed on failed")
            if not has_e:
                raise FieldError("error", "required on failed")
            if error.code == "cancelled":
                raise FieldError("error.code", "failed must not carry cancelled")
        else:  # cancelled
            if has_p:
                raise FieldError("payload", "not allowed on cancelled")
            if has_m:
                raise FieldError("media", "not allowed on cancelled")
            if has_e and error.code != "cancelled":
                raise FieldError("error.code", "cancelled must carry cancelled")


@dataclass
class StreamEnd:
    """The child's cleanup acknowledgment: sent once per call, after
    exactly one provider terminal, once the handler has returned."""

    call_id: str
    kind: Literal["end"] = field(default="end", init=False)
