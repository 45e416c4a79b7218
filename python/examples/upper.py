#!/usr/bin/env python3
"""Streaming text: upper-cases each text chunk as it arrives."""
from typing import AsyncIterator

import skulk
from skulk import StreamFrame, StreamInvoke

TEXT = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}


async def upper(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
    """Upper-cases each text chunk; completes when the caller completes."""
    n = 0
    async for f in frames:  # the caller's chunks; ends at the caller's completed
        text = (f.payload or {}).get("text")
        if not isinstance(text, str):
            raise skulk.ToolError("chunk has no text", "invalid_frame")
        yield call.chunk({"text": text.upper()})
        n += 1
    yield call.completed({"chunks": n})  # exactly one terminal


TOOLS = [skulk.Tool("upper", upper, "Upper-cases each text chunk.",
                    arguments_schema={"type": "object"}, input_schema=TEXT, output_schema=TEXT)]

if __name__ == "__main__":
    skulk.main(TOOLS)
