"""W3C trace context of an invoke's ``trace`` map, read without
OpenTelemetry (docs/protocol.md; python/README.md, "Tracing").

A Skulk host that traces writes its call's client span into the invoke as
``traceparent``, ``tracestate`` and ``baggage`` (W3C Trace Context and W3C
Baggage). ``call.trace_context`` gives a handler that span as a
TraceContext, to start its own span under it or to log its ids;
``call.baggage`` gives the baggage. A value that breaks the W3C rules is
ignored, as the specifications ask: it never fails the call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import unquote

__all__ = ["TraceContext", "parse_trace_context", "parse_traceparent", "parse_tracestate", "parse_baggage"]

_HEX = re.compile(r"[0-9a-f]+\Z")

#: tracestate's limits (W3C Trace Context §3.3): list members, key and value.
MAX_TRACESTATE_MEMBERS = 32
_TS_KEY = re.compile(r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})\Z")
_TS_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]\Z")

#: baggage's limits (W3C Baggage §3.3.1, as OpenTelemetry applies them).
MAX_BAGGAGE_MEMBERS = 64
MAX_BAGGAGE_BYTES = 8192
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_BAGGAGE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*\Z")


@dataclass(frozen=True)
class TraceContext:
    """The remote span an invoke carries: the host's client span of the
    call. ``trace_id`` (32 hex digits) and ``span_id`` (16) are lower-case
    hex, never all zero; ``sampled`` is the traceparent's sampled flag;
    ``tracestate`` the vendor entries as (key, value) pairs in order (empty
    when absent or invalid); ``baggage`` the W3C baggage as a dict of
    percent-decoded values (empty when absent or invalid)."""

    trace_id: str
    span_id: str
    sampled: bool
    flags: int = 0
    tracestate: tuple[tuple[str, str], ...] = ()
    baggage: dict[str, str] = field(default_factory=dict)

    @property
    def traceparent(self) -> str:
        """The traceparent that names this span (version 00), to pass on."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"


def _lower_hex(s: str, n: int) -> bool:
    return len(s) == n and _HEX.match(s) is not None


def parse_traceparent(s: object) -> Optional[tuple[str, str, int]]:
    """(trace_id, span_id, flags) of a W3C traceparent, or None when it is
    not one: version two lower-case hex digits other than ``ff``; version
    00 exactly version-traceid-parentid-flags, a later version may carry
    more after a dash; ids lower-case hex and not all zero."""
    if type(s) is not str or len(s) < 55 or s[2] != "-" or s[35] != "-" or s[52] != "-":
        return None
    if len(s) > 55 and s[55] != "-":
        return None
    version, trace_id, span_id, flags = s[0:2], s[3:35], s[36:52], s[53:55]
    if not _lower_hex(version, 2) or version == "ff" or (version == "00" and len(s) != 55):
        return None
    if not _lower_hex(trace_id, 32) or trace_id == "0" * 32:
        return None
    if not _lower_hex(span_id, 16) or span_id == "0" * 16:
        return None
    if not _lower_hex(flags, 2):
        return None
    return trace_id, span_id, int(flags, 16)


def parse_tracestate(s: object) -> tuple[tuple[str, str], ...]:
    """The (key, value) pairs of a W3C tracestate, in order; () when it is
    absent or breaks the rules (a bad key or value, a duplicate key, more
    than 32 members)."""
    if type(s) is not str or not s:
        return ()
    out = []
    seen = set()
    for member in s.split(","):
        member = member.strip(" \t")
        if not member:
            continue
        key, eq, value = member.partition("=")
        if not eq or _TS_KEY.match(key) is None or _TS_VALUE.match(value) is None or key in seen:
            return ()
        seen.add(key)
        out.append((key, value))
    if len(out) > MAX_TRACESTATE_MEMBERS:
        return ()
    return tuple(out)


def parse_baggage(s: object) -> dict[str, str]:
    """The members of W3C baggage as {key: value} (values percent-decoded,
    properties dropped); {} when it is absent or breaks the rules (a bad
    key or value, more than 64 members or 8,192 bytes)."""
    if type(s) is not str or not s:
        return {}
    if len(s.encode("utf-8", "surrogatepass")) > MAX_BAGGAGE_BYTES:
        return {}
    out = {}
    members = s.split(",")
    if len(members) > MAX_BAGGAGE_MEMBERS:
        return {}
    for member in members:
        kv = member.split(";", 1)[0]
        key, eq, value = kv.partition("=")
        key, value = key.strip(" \t"), value.strip(" \t")
        if not eq or _TOKEN.match(key) is None or _BAGGAGE_VALUE.match(value) is None:
            return {}
        try:
            out[key] = unquote(value, errors="strict")
        except UnicodeDecodeError:
            return {}
    return out


def parse_trace_context(trace: Optional[dict[str, str]]) -> Optional[TraceContext]:
    """The TraceContext of an invoke's trace map, or None when it has no
    valid traceparent."""
    if not trace:
        return None
    tp = parse_traceparent(trace.get("traceparent"))
    if tp is None:
        return None
    trace_id, span_id, flags = tp
    return TraceContext(trace_id, span_id, bool(flags & 1), flags, parse_tracestate(trace.get("tracestate")),
                        parse_baggage(trace.get("baggage")))
