#!/usr/bin/env python3
"""Echoing media: streams each inline media chunk back, raw bytes and
format metadata alike, without copying or base64-encoding the bytes."""
from typing import AsyncIterator

import skulk
from skulk import InlineMedia, StreamFrame, StreamInvoke


async def echo_media(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
    total = 0
    async for f in frames:
        if not isinstance(f.media, InlineMedia):
            raise skulk.ToolError("chunk has no inline media", "invalid_frame")
        m = f.media
        # The received buffer is written back as it is (one sendmsg, no copy).
        yield call.chunk(media=InlineMedia(m.data, m.media_type, m.codec, m.sample_rate, m.channels,
                                           m.timestamp_seconds, m.duration_seconds))
        total += len(m.data)
    yield call.completed({"bytes": total})


TOOLS = [skulk.Tool("echo_media", echo_media, "Streams each inline media chunk back.")]

if __name__ == "__main__":
    skulk.main(TOOLS)
