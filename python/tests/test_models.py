"""The streams API's names, fields, defaults and constraints (the seed
note, SDK 0.4.0), each as python/README.md's table maps it: models that
validate when constructed, the keyword kind=, from_dict/to_dict, and one
error type for every refusal, naming the field and never the value."""

import asyncio
import inspect
import typing
import unittest

import skulk
from skulk import (
    BlobMedia,
    FieldError,
    InlineMedia,
    Sequence,
    StreamEnd,
    StreamError,
    StreamFrame,
)

SECRET = "s3cr3t-value-" * 3
SHA = "a" * 64


class StreamErrorTest(unittest.TestCase):
    def test_fields(self):
        e = StreamError(code="timeout", message="m")
        self.assertEqual((e.code, e.message), ("timeout", "m"))
        self.assertEqual(set(typing.get_args(skulk.ErrorCode)),
                         {"provider_error", "transport_error", "unreachable", "cancelled", "timeout", "invalid_frame"})

    def test_message_max_length_2048(self):
        StreamError("provider_error", "m" * 2048)
        with self.assertRaises(FieldError) as cm:
            StreamError("provider_error", "m" * 2049)
        self.assertEqual(cm.exception.field, "error.message")

    def test_code_literal(self):
        with self.assertRaises(FieldError) as cm:
            StreamError(SECRET, "m")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "error.code")
        self.assertNotIn(SECRET, str(cm.exception))

    def test_dict_round_trip(self):
        e = StreamError("invalid_frame", "bad")
        self.assertEqual(StreamError.from_dict(e.to_dict()), e)
        with self.assertRaises(FieldError) as cm:
            StreamError.from_dict({"message": "x"})
        self.assertEqual(cm.exception.field, "error.code")


class InlineMediaTest(unittest.TestCase):
    def test_defaults(self):
        m = InlineMedia(b"abc", "audio/pcm")
        self.assertEqual(m.kind, "inline")
        self.assertEqual((m.codec, m.sample_rate, m.channels, m.timestamp_seconds, m.duration_seconds), (None,) * 5)

    def test_keyword_kind(self):
        m = InlineMedia(kind="inline", data=b"abc", media_type="audio/pcm", sample_rate=16000, channels=1)
        self.assertEqual((m.kind, m.sample_rate, m.channels), ("inline", 16000, 1))
        with self.assertRaises(FieldError) as cm:
            InlineMedia(kind="blob", data=b"", media_type="a/b")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "media.kind")

    def test_constraints(self):
        for kw, fld in [
            ({"media_type": "a" * 257}, "media.media_type"),
            ({"sample_rate": 0}, "media.sample_rate"),
            ({"sample_rate": -8000}, "media.sample_rate"),
            ({"channels": 0}, "media.channels"),
            ({"timestamp_seconds": -0.5}, "media.timestamp_seconds"),
            ({"duration_seconds": -1}, "media.duration_seconds"),
            ({"duration_seconds": float("nan")}, "media.duration_seconds"),
        ]:
            with self.subTest(fld=fld, kw=kw):
                args = {"data": b"x", "media_type": "a/b", **kw}
                with self.assertRaises(FieldError) as cm:
                    InlineMedia(**args)
                self.assertEqual(cm.exception.field, fld)
        InlineMedia(b"", "a" * 256, timestamp_seconds=0, duration_seconds=0.0, sample_rate=1, channels=1)

    def test_data_is_bytes_never_base64(self):
        with self.assertRaises(FieldError) as cm:
            InlineMedia("YWJj", "a/b")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "media.data")
        buf = bytearray(b"abc")
        m = InlineMedia(memoryview(buf), "a/b")
        self.assertIs(m.to_dict()["data"].obj, buf)  # the caller's buffer, not a copy

    def test_dict_round_trip(self):
        m = InlineMedia(b"abc", "audio/opus", "opus", 48000, 2, 1.5, 0.02)
        self.assertEqual(InlineMedia.from_dict(m.to_dict()), m)
        self.assertEqual(skulk.frames.media_from_dict(m.to_dict()), m)


class BlobMediaTest(unittest.TestCase):
    def test_fields_and_kind(self):
        b = BlobMedia(kind="blob", blob_id="b1", size_bytes=0, sha256=SHA, media_type="video/mp4")
        self.assertEqual((b.kind, b.blob_id, b.size_bytes), ("blob", "b1", 0))
        self.assertEqual(BlobMedia.from_dict(b.to_dict()), b)

    def test_constraints(self):
        for kw, fld in [
            ({"size_bytes": -1}, "media.size_bytes"),
            ({"sha256": "A" * 64}, "media.sha256"),
            ({"sha256": SECRET}, "media.sha256"),
            ({"blob_id": ""}, "media.blob_id"),
            ({"media_type": ""}, "media.media_type"),
        ]:
            with self.subTest(fld=fld):
                args = {"blob_id": "b", "size_bytes": 1, "sha256": SHA, "media_type": "a/b", **kw}
                with self.assertRaises(FieldError) as cm:
                    BlobMedia(**args)
                self.assertEqual(cm.exception.field, fld)
                self.assertNotIn(SECRET, str(cm.exception))

    def test_discriminator(self):
        self.assertIsInstance(skulk.frames.media_from_dict({"kind": "blob", "blob_id": "b", "size_bytes": 1, "sha256": SHA,
                                                            "media_type": "a/b"}), BlobMedia)
        with self.assertRaises(FieldError) as cm:
            skulk.frames.media_from_dict({"kind": "other"})
        self.assertEqual(cm.exception.field, "media.kind")


class StreamFrameTest(unittest.TestCase):
    def test_fields_and_defaults(self):
        f = StreamFrame(call_id="c", direction="caller_to_provider", sequence=0, kind="started")
        self.assertEqual((f.synthetic, f.payload, f.media, f.error), (False, None, None, None))
        self.assertFalse(f.is_terminal())
        self.assertIs(f.lifecycle_shape(), f)
        for k in ("completed", "failed", "cancelled"):
            err = StreamError("provider_error", "x") if k == "failed" else None
            self.assertTrue(StreamFrame("c", "provider_to_caller", 1, k, error=err).is_terminal())  # type: ignore[arg-type]

    def test_constraints(self):
        for kw, fld in [
            ({"call_id": ""}, "call_id"),
            ({"call_id": "x" * 129}, "call_id"),
            ({"sequence": -1}, "sequence"),
            ({"sequence": 0}, "sequence"),  # only started is sequence 0
            ({"kind": "bogus"}, "kind"),
            ({"direction": "sideways"}, "direction"),
            ({"synthetic": True}, "synthetic"),
            ({"payload": {"x": SECRET.encode()}}, "payload"),
            ({"payload": None}, "payload"),  # a chunk needs payload or media
            ({"error": StreamError("provider_error", "x")}, "error"),  # not on a chunk
        ]:
            with self.subTest(fld=fld, kw=list(kw)):
                args = {"call_id": "c", "direction": "caller_to_provider", "sequence": 1, "kind": "chunk", "payload": {"a": 1},
                        **kw}
                with self.assertRaises(FieldError) as cm:
                    StreamFrame(**args)
                self.assertEqual(cm.exception.field, fld)
                self.assertNotIn(SECRET, str(cm.exception))
        StreamFrame("x" * 128, "caller_to_provider", 1, "chunk", {"a": 1})

    def test_lifecycle_shape(self):
        for kw, fld in [
            ({"kind": "failed", "payload": None}, "error"),
            ({"kind": "failed", "payload": None, "error": StreamError("cancelled")}, "error.code"),
            ({"kind": "cancelled", "payload": None, "error": StreamError("timeout")}, "error.code"),
            ({"kind": "completed", "payload": None, "media": InlineMedia(b"", "a/b")}, "media"),
            ({"kind": "started", "sequence": 0}, "payload"),
        ]:
            with self.subTest(fld=fld):
                args = {"call_id": "c", "direction": "caller_to_provider", "sequence": 1, "kind": "chunk", "payload": {"a": 1},
                        **kw}
                with self.assertRaises(FieldError) as cm:
                    StreamFrame(**args)
                self.assertEqual(cm.exception.field, fld)

    def test_dict_round_trip(self):
        for f in [
            StreamFrame("c", "provider_to_caller", 1, "chunk", {"a": [1, 2.5, None, "x"]}, InlineMedia(b"ab", "a/b")),
            StreamFrame("c", "provider_to_caller", 2, "failed", error=StreamError("timeout", "late")),
            StreamFrame("c", "caller_to_provider", 3, "chunk", media=BlobMedia("b", 1, SHA, "a/b")),
        ]:
            self.assertEqual(StreamFrame.from_dict(f.to_dict()), f)
        d = StreamFrame("c", "caller_to_provider", 0, "started").to_dict()
        self.assertEqual(d, {"call_id": "c", "direction": "caller_to_provider", "sequence": 0, "kind": "started",
                             "synthetic": False, "payload": None, "media": None, "error": None})
        with self.assertRaises(FieldError) as cm:
            StreamFrame.from_dict({"direction": "caller_to_provider", "sequence": 0, "kind": "started"})
        self.assertEqual(cm.exception.field, "call_id")


class StreamEndTest(unittest.TestCase):
    def test_fields(self):
        e = StreamEnd(kind="end", call_id="c")
        self.assertEqual((e.kind, e.call_id), ("end", "c"))
        self.assertEqual(StreamEnd.from_dict(e.to_dict()), e)
        for cid in ("", "x" * 129):
            with self.assertRaises(FieldError) as cm:
                StreamEnd(cid)
            self.assertEqual(cm.exception.field, "call_id")

    def test_packet_union(self):
        self.assertEqual(set(typing.get_args(skulk.StreamPacket)), {StreamFrame, StreamEnd})
        self.assertIn(StreamFrame, typing.get_args(skulk.Packet))
        self.assertIsInstance(skulk.frames.packet_from_dict({"kind": "end", "call_id": "c"}), StreamEnd)


class SignatureTest(unittest.TestCase):
    """The functions of the note, with its parameters."""

    def test_write_read_packet(self):
        self.assertTrue(inspect.iscoroutinefunction(skulk.write_packet))
        self.assertTrue(inspect.iscoroutinefunction(skulk.read_packet))
        self.assertEqual(list(inspect.signature(skulk.write_packet).parameters)[:2], ["writer", "frame"])
        self.assertEqual(list(inspect.signature(skulk.read_packet).parameters)[:1], ["reader"])

    def test_sequence(self):
        s = Sequence("c", "caller_to_provider", next_sequence=3)
        self.assertEqual(s.next_sequence, 3)
        with self.assertRaises(FieldError):
            Sequence("c", "sideways")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Sequence("c", "caller_to_provider", 3)  # type: ignore[misc]  # keyword-only, as in the note

    def test_execute_stream(self):
        self.assertTrue(inspect.iscoroutinefunction(skulk.execute_stream))
        self.assertEqual(list(inspect.signature(skulk.execute_stream).parameters), ["startup", "call", "handler"])

    def test_stream_handler(self):
        args = typing.get_args(skulk.StreamHandler)
        self.assertEqual(args[0][0], skulk.StreamInvoke)
        self.assertEqual(typing.get_origin(args[1]), typing.get_origin(typing.AsyncGenerator[StreamFrame, None]))

    def test_execute_stream_refuses_an_invoke_not_admitted(self):
        async def h(call, frames):
            yield call.completed()

        with self.assertRaises(FieldError) as cm:
            asyncio.run(skulk.execute_stream(skulk.Startup(1), skulk.StreamInvoke("c", "t"), h))
        self.assertEqual(cm.exception.field, "call")


class ErrorsTest(unittest.TestCase):
    def test_one_base(self):
        for name in skulk.__all__:
            obj = getattr(skulk, name)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                with self.subTest(name):
                    self.assertTrue(name.endswith("Error") or name == "ConnectionClosed", name)
                    if issubclass(obj, asyncio.CancelledError):
                        self.assertFalse(issubclass(obj, Exception), "a cancellation must not be an Exception")
                    else:
                        self.assertTrue(issubclass(obj, skulk.SkulkError), name)

    def test_kinds(self):
        self.assertTrue(issubclass(skulk.ConnectionClosed, ConnectionError))
        self.assertTrue(issubclass(skulk.IncompletePacketError, skulk.ConnectionClosed))
        self.assertTrue(issubclass(skulk.FieldError, ValueError))
        self.assertTrue(issubclass(skulk.SchemaError, skulk.FieldError))
        self.assertTrue(issubclass(skulk.SequenceGapError, skulk.SequenceError))
        self.assertTrue(issubclass(skulk.CallTimeoutError, skulk.CallCancelledError))
        self.assertTrue(issubclass(skulk.CallCancelledError, asyncio.CancelledError))

    def test_version_says_the_protocol(self):
        self.assertEqual(skulk.PROTOCOL_VERSION, int(skulk.__version__.split(".")[0]))
        self.assertEqual(skulk.PROTOCOL_VERSION, 1)


class ToolTest(unittest.TestCase):
    def test_refuses_a_handler_that_is_not_an_async_generator(self):
        async def coro(call, frames):
            return None

        def plain(call, frames):
            return None

        for h, reason in [(coro, "coroutine"), (plain, "not an async generator")]:
            with self.subTest(reason):
                with self.assertRaises(FieldError) as cm:
                    skulk.Tool("t", h)  # type: ignore[arg-type]
                self.assertEqual(cm.exception.field, "tools.handler")
                self.assertIn(reason, cm.exception.reason)

    def test_accepts_async_generators(self):
        async def gen(call, frames):
            yield call.completed()

        class Obj:
            async def __call__(self, call, frames):
                yield call.completed()

            async def method(self, call, frames):
                yield call.completed()

        import functools

        for h in (gen, Obj(), Obj().method, functools.partial(gen)):
            skulk.Tool("t", h)

    def test_refuses_bad_ids_and_schemas(self):
        async def gen(call, frames):
            yield call.completed()

        for kw, fld in [({"id": ""}, "tools.id"), ({"id": "x" * 129}, "tools.id"), ({"version": "v" * 129}, "tools.version"),
                        ({"output_schema": {"x": float("inf")}}, "tools.output_schema")]:
            with self.subTest(fld):
                with self.assertRaises(FieldError) as cm:
                    skulk.Tool(**{"id": "t", "handler": gen, **kw})
                self.assertEqual(cm.exception.field, fld)


if __name__ == "__main__":
    unittest.main()
