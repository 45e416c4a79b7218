"""skulk.testing: a handler run in-process against a scripted caller, on
the SDK's real stream path; with it, the SDK's own cancellation types,
its output schema checks, its logging and its handler contract."""

import asyncio
import unittest
from typing import AsyncIterator

import skulk
from skulk import InlineMedia, StreamFrame, StreamInvoke, Tool
from skulk.demo import tools
from skulk.testing import call_tool, run_tool

DEMO = {t.id: t for t in tools(test_tools=True)}
TEXT = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}


class HelperTest(unittest.TestCase):
    def test_streaming_text(self):
        res = call_tool(DEMO["upper"], {}, [{"text": "a"}, {"text": "b"}])
        self.assertEqual(res.outcome, "completed")
        self.assertEqual(res.payloads, [{"text": "A"}, {"text": "B"}])
        self.assertEqual(res.result, {"chunks": 2})
        self.assertTrue(res.ended)
        self.assertEqual([f.sequence for f in res.frames], [1, 2, 3])

    def test_echoing_media(self):
        data = bytes(range(256)) * 512  # 128 KiB: received into its own buffer
        res = call_tool(DEMO["echo"], {}, [InlineMedia(data, "audio/pcm", sample_rate=16000), ({"n": 1}, None)])
        self.assertEqual(res.outcome, "completed")
        m = res.chunks[0].media
        assert isinstance(m, InlineMedia)
        self.assertEqual((bytes(m.data), m.media_type, m.sample_rate), (data, "audio/pcm", 16000))
        self.assertEqual(res.chunks[1].payload, {"n": 1})

    def test_bare_handler_and_async_use(self):
        async def h(call: StreamInvoke, frames: AsyncIterator[StreamFrame]):
            yield call.completed({"args": call.arguments})

        res = asyncio.run(run_tool(h, {"a": 1}))
        self.assertEqual(res.result, {"args": {"a": 1}})

    def test_caller_cancel(self):
        res = call_tool(DEMO["sleep"], {"ms": 60000}, caller_cancel=True)
        self.assertEqual((res.outcome, res.ended), ("cancelled", True))

    def test_control_cancel(self):
        res = call_tool(DEMO["count"], {"n": 100000}, cancel_after_chunks=3, timeout=30)
        self.assertEqual(res.outcome, "cancelled")
        self.assertGreaterEqual(len(res.chunks), 3)
        self.assertLess(len(res.chunks), 100000)

    def test_returns_without_terminal(self):
        async def h(call, frames):
            yield call.chunk({"x": 1})

        res = call_tool(h)
        self.assertEqual((res.outcome, res.error.code, res.error.message),
                         ("failed", "provider_error", "handler returned without a terminal"))


class CancellationTypeTest(unittest.TestCase):
    def test_deadline_is_call_timeout_error_from_the_input(self):
        seen = []

        async def h(call, frames):
            try:
                async for _ in frames:
                    pass
            except skulk.CallTimeoutError as e:
                seen.append((type(e).__name__, e.cause, isinstance(e, asyncio.CancelledError)))
                raise
            yield call.completed()

        res = call_tool(h, complete=False, timeout_ms=50)
        self.assertEqual((res.outcome, res.error.code), ("failed", "timeout"))
        self.assertEqual(seen, [("CallTimeoutError", "timeout", True)])

    def test_control_cancel_is_call_cancelled_error(self):
        seen = []

        async def h(call, frames):
            yield call.chunk({"waiting": True})
            try:
                async for _ in frames:
                    pass
            except skulk.CallCancelledError as e:
                seen.append((type(e).__name__, e.cause, call.cause))
                raise
            yield call.completed()

        res = call_tool(h, complete=False, cancel_after_chunks=1)
        self.assertEqual(res.outcome, "cancelled")
        self.assertEqual(seen, [("CallCancelledError", "cancel_requested", skulk.Cause.CANCEL_REQUESTED)])

    def test_flush_after_timeout(self):
        seen = []

        async def h(call, frames):
            yield call.chunk({"x": 1})
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass
            try:
                await call.flush()
            except skulk.CallTimeoutError:
                seen.append("flush")
                raise

        res = call_tool(h, timeout_ms=50)
        self.assertEqual(res.outcome, "failed")
        self.assertEqual(seen, ["flush"])

    def test_yield_after_terminal_is_after_terminal_error(self):
        seen = []

        async def h(call, frames):
            yield call.completed()
            try:
                yield call.chunk({"late": True})
            except skulk.AfterTerminalError:
                seen.append("refused")

        res = call_tool(h)
        self.assertEqual((res.outcome, len(res.frames), seen), ("completed", 1, ["refused"]))


class OutputSchemaTest(unittest.TestCase):
    def test_chunk_breaking_output_schema(self):
        seen = []

        async def h(call, frames):
            try:
                yield call.chunk({"text": 5})
            except skulk.SchemaError as e:
                seen.append((e.schema, e.field, e.keyword, e.value))
                raise

        with self.assertLogs("skulk", "WARNING"):
            res = call_tool(Tool("t", h, output_schema=TEXT))
        self.assertEqual((res.outcome, res.error.code), ("failed", "invalid_frame"))
        self.assertEqual(res.error.message, "output payload breaks its schema at /text (type): got integer")
        self.assertEqual(res.chunks, [])
        self.assertEqual(seen, [("output", "/text", "type", "integer")])

    def test_result_schema_and_required(self):
        async def h(call, frames):
            yield call.completed({"other": "x" * 40})

        with self.assertLogs("skulk", "WARNING"):
            res = call_tool(Tool("t", h, result_schema=TEXT))
        self.assertEqual(res.error.message, "result payload breaks its schema at /text (required): got nothing")
        self.assertNotIn("x" * 40, res.error.message)

    def test_additional_properties(self):
        async def h(call, frames):
            yield call.chunk({"text": "a", "secret": "hunter2"})
            yield call.completed()

        schema = dict(TEXT, additionalProperties=False)
        with self.assertLogs("skulk", "WARNING"):
            res = call_tool(Tool("t", h, output_schema=schema))
        self.assertEqual(res.error.message,
                         "output payload breaks its schema at /secret (additionalProperties): got string of 7 bytes")

    def test_valid_output_and_media_only_chunks_pass(self):
        async def h(call, frames):
            yield call.chunk({"text": "a"})
            yield call.chunk(media=InlineMedia(b"x", "a/b"))
            yield call.completed({"text": "done"})

        res = call_tool(Tool("t", h, output_schema=TEXT, result_schema=TEXT))
        self.assertEqual(res.outcome, "completed")

    def test_off_when_asked(self):
        async def h(call, frames):
            yield call.chunk({"text": 5})
            yield call.completed()

        res = call_tool(Tool("t", h, output_schema=TEXT), check_output=False)
        self.assertEqual(res.outcome, "completed")


class LoggingTest(unittest.TestCase):
    def test_handler_exception_is_logged_to_skulk(self):
        async def h(call, frames):
            raise KeyError("secret-key")
            yield call.completed()

        with self.assertLogs("skulk", "ERROR") as cm:
            res = call_tool(h)
        self.assertEqual((res.outcome, res.error.message), ("failed", "handler raised KeyError"))
        self.assertIn("handler raised", cm.output[0])
        self.assertIn("call_id=test-call", cm.output[0])

    def test_tool_error(self):
        async def h(call, frames):
            raise skulk.ToolError("no such user", "invalid_frame")
            yield call.completed()

        res = call_tool(h)
        self.assertEqual((res.outcome, res.error.code, res.error.message), ("failed", "invalid_frame", "no such user"))


if __name__ == "__main__":
    unittest.main()
