#!/usr/bin/env python3
"""A provider inside an existing asyncio application: the application
keeps its own tasks on its loop, serve() answers the host beside them,
and every call runs through the application's dispatch, which wraps
execute_stream with what the application needs per call."""
import asyncio
import contextvars
import logging
from typing import AsyncIterator

import skulk
from skulk import StreamFrame, StreamInvoke

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
state = {"ticks": 0}


async def ticker() -> None:
    """The application's own work, sharing the loop with the calls."""
    while True:
        await asyncio.sleep(0.1)
        state["ticks"] += 1


async def status(call: StreamInvoke, frames: AsyncIterator[StreamFrame]) -> skulk.Output:
    yield call.completed({"ticks": state["ticks"], "request_id": request_id.get()})


async def dispatch(startup: skulk.Startup, call: StreamInvoke, tool: skulk.Tool) -> None:
    """Runs in each call's owned task: set per-call context, then serve
    the stream."""
    request_id.set(call.call_id)
    await skulk.execute_stream(startup, call, tool.handler)


TOOLS = [skulk.Tool("status", status, "The application's status.")]


async def app() -> int:
    logging.basicConfig(level=logging.INFO)
    tick = asyncio.create_task(ticker())
    try:
        return await skulk.serve(TOOLS, dispatch=dispatch)  # until the host drains us or goes away
    finally:
        tick.cancel()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(app()))
