"""The demo tools of cmd/skulk-child (child/demotools), in Python: echo,
upper, count, media, sleep, fail; with --test-tools, sleep's
ignore_cancel and crash; with --call-tools, relay, which calls another
tool through the host. They are what conformance/provider drives."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any, AsyncGenerator, AsyncIterator, Optional, cast

import skulk
from skulk import InlineMedia, JsonObject, StreamFrame, StreamInvoke, Tool

Out = AsyncGenerator[StreamFrame, None]
Frames = AsyncIterator[StreamFrame]

MAX_COUNT_SIZE = 60000
DEFAULT_MEDIA_CHUNK = 65536
MAX_MEDIA_CHUNK = 16777216
MEDIA_TYPE = "application/octet-stream"
MEDIA_PERIOD = 251
CRASH_STATUS = 3


def _object(props: dict[str, Any], *required: str) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        s["required"] = list(required)
    return s


def _integer(lo: int, hi: int = 0, default: Optional[int] = None) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "integer", "minimum": lo}
    if hi > 0:
        s["maximum"] = hi
    if default is not None:
        s["default"] = default
    return s


ANY: dict[str, Any] = {"type": "object"}
CHUNKS = _object({"chunks": _integer(0)}, "chunks")


def _int_arg(args: JsonObject, key: str, default: Optional[int] = None) -> Optional[int]:
    v = args.get(key, default)
    return v if type(v) is int else None


async def echo(call: StreamInvoke, frames: Frames) -> Out:
    n = 0
    async for f in frames:
        yield call.chunk(f.payload, f.media)
        n += 1
    yield call.completed({"chunks": n})


async def upper(call: StreamInvoke, frames: Frames) -> Out:
    n = 0
    async for f in frames:
        t = (f.payload or {}).get("text")
        if type(t) is not str:
            yield call.failed("chunk has no text")
            return
        yield call.chunk({"text": t.upper()})
        n += 1
    yield call.completed({"chunks": n})


async def count(call: StreamInvoke, frames: Frames) -> Out:
    n, size = _int_arg(call.arguments, "n"), _int_arg(call.arguments, "size", 0)
    if n is None or size is None or n < 0 or not 0 <= size <= MAX_COUNT_SIZE:
        yield call.failed("arguments: n must be >= 0, size in [0, 60000]")
        return
    pad = "x" * size
    for i in range(n):
        yield call.chunk({"i": i, "pad": pad} if size else {"i": i})
    yield call.completed({"n": n})


async def media(call: StreamInvoke, frames: Frames) -> Out:
    total, chunk = _int_arg(call.arguments, "bytes"), _int_arg(call.arguments, "chunk", DEFAULT_MEDIA_CHUNK)
    if total is None or chunk is None or total < 0 or not 1 <= chunk <= MAX_MEDIA_CHUNK:
        yield call.failed("arguments: bytes must be >= 0, chunk in [1, 16777216]")
        return
    # The pattern repeats every 251 bytes, so every chunk is a window of one
    # buffer: no per-byte work and no copy (the SDK writes the view as is).
    n0 = min(chunk, max(total, 1))
    pattern = memoryview(bytes(i % MEDIA_PERIOD for i in range(MEDIA_PERIOD)) * (n0 // MEDIA_PERIOD + 2))
    h = hashlib.sha256()
    off = 0
    while off < total:
        n = min(chunk, total - off)
        start = off % MEDIA_PERIOD
        b = pattern[start : start + n]
        h.update(b)
        yield call.chunk(media=InlineMedia(b, MEDIA_TYPE))
        off += n
    yield call.completed({"sha256": h.hexdigest()})


def _sleep(test_tools: bool) -> skulk.StreamHandler:
    async def sleep(call: StreamInvoke, frames: Frames) -> Out:
        ms = _int_arg(call.arguments, "ms")
        if ms is None or ms < 0:
            yield call.failed("arguments: ms must be >= 0")
            return
        ignore = call.arguments.get("ignore_cancel", False) is True
        if ignore and not test_tools:
            yield call.failed("arguments: ignore_cancel needs --test-tools")
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + min(ms / 1000.0, 1e10)
        while True:
            try:
                await asyncio.sleep(max(0.0, end - loop.time()))
                break
            except asyncio.CancelledError:
                if not ignore:
                    raise
        yield call.completed({"slept_ms": ms})

    return sleep


async def fail(call: StreamInvoke, frames: Frames) -> Out:
    msg = call.arguments.get("message")
    if type(msg) is not str:
        yield call.failed("arguments: message must be a string")
        return
    yield call.failed(msg)


async def crash(call: StreamInvoke, frames: Frames) -> Out:
    after = _int_arg(call.arguments, "after")
    if after is None or after < 0:
        yield call.failed("arguments: after must be >= 0")
        return
    for i in range(after):
        yield call.chunk({"i": i})
    await call.flush()
    os._exit(CRASH_STATUS)
    yield  # never reached; makes this an async generator


def _relay_error(call: StreamInvoke, e: skulk.SkulkError) -> StreamFrame:
    """relay's failure for the error of its call: the callee's code and
    message, or provider_error with the refusal's text."""
    if isinstance(e, skulk.CallError):
        if e.code == "cancelled":
            return call.failed("callee cancelled: " + e.message)
        return call.failed(e.message, e.code)
    return call.failed(str(e))


async def relay(call: StreamInvoke, frames: Frames) -> Out:
    tool, args, leave = call.arguments.get("tool"), call.arguments.get("args"), call.arguments.get("leave", False)
    if type(tool) is not str or not tool:
        yield call.failed("arguments: tool must be a tool id")
        return
    if args is not None and type(args) is not dict:
        yield call.failed("arguments: args must be an object")
        return
    given = call.arguments.get("input")
    whole: Optional[list[JsonObject]] = None
    if given is not None:
        if type(given) is not list or not all(type(o) is dict for o in given):
            yield call.failed("arguments: input must hold objects")
            return
        whole = cast(list[JsonObject], given)  # each checked just above
    try:
        # With input, the call's whole input goes with its invoke in one
        # write (the fast path of a unary call).
        nested = await call.call(tool, args, input=whole)
    except skulk.SkulkError as e:
        yield _relay_error(call, e)
        return
    if leave is True:
        yield call.completed()  # the SDK cancels the call left open, and waits for its end, first
        return
    async with nested:
        if whole is None:
            await nested.close_send()
        async for f in nested:
            if f.kind == "chunk":
                yield call.chunk(f.payload, f.media)
        try:
            res = await nested.wait()
        except skulk.CallError as e:
            yield _relay_error(call, e)
            return
    yield call.completed(res)


def tools(test_tools: bool = False, call_tools: bool = False) -> list[Tool]:
    """The demo tools; test_tools adds sleep's ignore_cancel and crash,
    call_tools relay."""
    sleep_props = {"ms": _integer(0)}
    desc = "Sleeps ms milliseconds without reading its input; honours cancellation."
    if test_tools:
        sleep_props["ignore_cancel"] = {"type": "boolean", "default": False}
        desc = "Sleeps ms milliseconds without reading its input; honours cancellation unless ignore_cancel."
    out = [
        Tool("echo", echo, "Streams each caller chunk back, payload and inline media alike; completes when the caller completes.",
             _object({}), ANY, ANY, CHUNKS),
        Tool("upper", upper, 'Turns caller chunks {"text": s} into provider chunks {"text": upper(s)}.',
             _object({}), _object({"text": {"type": "string"}}, "text"), _object({"text": {"type": "string"}}, "text"), CHUNKS),
        Tool("count", count, 'Sends n chunks {"i": i} numbered from 0, each padded with "pad" of size bytes; needs no caller input.',
             _object({"n": _integer(0), "size": _integer(0, MAX_COUNT_SIZE, 0)}, "n"), ANY,
             _object({"i": _integer(0), "pad": {"type": "string"}}, "i"), _object({"n": _integer(0)}, "n")),
        Tool("media", media, "Sends inline media chunks (application/octet-stream) totalling bytes; the result is their SHA-256.",
             _object({"bytes": _integer(0), "chunk": _integer(1, MAX_MEDIA_CHUNK, DEFAULT_MEDIA_CHUNK)}, "bytes"), ANY, ANY,
             _object({"sha256": {"type": "string", "pattern": "^[a-f0-9]{64}$"}}, "sha256")),
        Tool("sleep", _sleep(test_tools), desc, _object(sleep_props, "ms"), ANY, ANY, _object({"slept_ms": _integer(0)}, "slept_ms")),
        Tool("fail", fail, "Ends with failed provider_error carrying message (sanitized).",
             _object({"message": {"type": "string"}}, "message"), ANY, ANY, ANY),
    ]
    if test_tools:
        out.append(Tool("crash", crash, 'Sends after chunks {"i": i}, then ends the process with status 3 (test only).',
                        _object({"after": _integer(0)}, "after"), ANY, _object({"i": _integer(0)}, "i"), ANY))
    if call_tools:
        out.append(Tool("relay", relay, "Calls tool through the host with args and streams its output back; "
                        "completes with its result or ends with its failure.",
                        _object({"tool": {"type": "string", "minLength": 1, "maxLength": 128}, "args": {"type": "object"},
                                 "leave": {"type": "boolean", "default": False},
                                 "input": {"type": "array", "items": {"type": "object"}, "maxItems": 8}}, "tool"),
                        ANY, ANY, ANY))
    return out


def main() -> None:
    """The ``skulk-py-child`` command: serve the demo tools (with
    ``--test-tools``, also sleep's ignore_cancel and crash; with
    ``--call-tools``, relay) to the host that started this process."""
    import sys

    skulk.main(tools("--test-tools" in sys.argv[1:], "--call-tools" in sys.argv[1:]), sdk="skulk-python-demo/" + skulk.__version__, switch_interval=0.001)


if __name__ == "__main__":
    main()
