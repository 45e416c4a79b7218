#!/usr/bin/env python3
"""A nested call: looks a word up through the host's lookup tool and
streams lookup's output back, completing with its result."""
from typing import AsyncIterator

import skulk
from skulk import StreamFrame, StreamInvoke


async def relay(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
    async with call.call("lookup", {"word": call.arguments["word"]}) as nested:  # cancelled at the block's end if open
        await nested.send({"hint": "animal"})   # caller chunks, checked against lookup's input_schema
        await nested.close_send()               # lookup's input ends; its output goes on
        async for f in nested:                  # lookup's chunks, then its terminal, last
            if f.kind == "chunk":
                yield call.chunk(f.payload, f.media)
        try:
            result = await nested.wait()        # completed's payload
        except skulk.CallError as e:            # failed or cancelled: e.code, e.message, e.synthetic
            raise skulk.ToolError(e.message, e.code)  # a cancelled callee fails this call provider_error
    yield call.completed(result)


TOOLS = [skulk.Tool("relay", relay, "Looks word up through the host and streams the answer back.",
                    arguments_schema={"type": "object", "required": ["word"], "properties": {"word": {"type": "string"}}})]

if __name__ == "__main__":
    skulk.main(TOOLS)
