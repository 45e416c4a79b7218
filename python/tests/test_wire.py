"""The wire codec against the golden vectors and the rules of
docs/protocol.md §2-§4."""

import asyncio
import glob
import json
import os
import re
import struct
import subprocess
import sys
import unittest

import msgpack

import skulk
from skulk import wire
from skulk.frames import BlobMedia, FieldError, InlineMedia, StreamEnd, StreamError, StreamFrame
from skulk.wire import (
    AttachmentLengthError,
    BadFieldError,
    HeaderLengthError,
    InvalidPacketError,
    Limits,
    MalformedHeaderError,
    UnexpectedAttachmentError,
    UnknownTypeError,
    decode_packet,
    encode_packet,
)

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "wire", "testdata", "golden")


def pkt(header, att=b"", raw=False):
    hb = header if raw else msgpack.packb(header, use_bin_type=True)
    return struct.pack(">II", len(hb), len(att)) + hb + att


def golden_txt(name):
    with open(os.path.join(GOLDEN, name + ".txt")) as f:
        text = f.read()
    h = int(re.search(r"header length H = (\d+)", text).group(1))
    a = int(re.search(r"attachment length A = (\d+)", text).group(1))
    body = re.search(r"^\{.*?^\}", text, re.S | re.M).group(0)
    att = b""
    m = re.search(r"attachment hex:\n(.*)", text, re.S)
    if m:
        for line in m.group(1).splitlines():
            parts = line.split("|")[0].split()[1:]
            att += bytes(int(x, 16) for x in parts)
    return h, a, json.loads(body), att


class GoldenTest(unittest.TestCase):
    def names(self):
        names = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(GOLDEN, "*.bin")))
        self.assertGreaterEqual(len(names), 22)
        return names

    def test_decode_and_reencode_byte_for_byte(self):
        for name in self.names():
            with self.subTest(name):
                with open(os.path.join(GOLDEN, name + ".bin"), "rb") as f:
                    b = f.read()
                p = decode_packet(b)
                head, att = encode_packet(p)
                self.assertEqual(head + bytes(att), b)

    def test_fields_match_txt(self):
        for name in self.names():
            with self.subTest(name):
                with open(os.path.join(GOLDEN, name + ".bin"), "rb") as f:
                    b = f.read()
                h, a, want, att = golden_txt(name)
                self.assertEqual(struct.unpack(">II", b[:8]), (h, a))
                p = decode_packet(b)
                got, _ = wire._header(p)
                self.assertEqual(json.loads(json.dumps(got)), want)
                if a:
                    self.assertEqual(bytes(p.media.data), att)
                    self.assertIsInstance(p.media, InlineMedia)

    def test_types(self):
        want = {
            "hello": wire.Hello, "startup": wire.Startup, "ping": wire.Ping, "pong": wire.Pong,
            "cancel": wire.Cancel, "cancel_no_reason": wire.Cancel, "drain": wire.Drain, "bye": wire.Bye,
            "bye_no_reason": wire.Bye, "invoke": wire.StreamInvoke, "invoke_minimal": wire.StreamInvoke,
            "end": StreamEnd, "frame_chunk_blob": StreamFrame,
        }
        for name, t in want.items():
            with open(os.path.join(GOLDEN, name + ".bin"), "rb") as f:
                self.assertIs(type(decode_packet(f.read())), t, name)

    def test_back_to_back_byte_at_a_time(self):
        data = b""
        for name in self.names():
            with open(os.path.join(GOLDEN, name + ".bin"), "rb") as f:
                data += f.read()

        async def run():
            r = asyncio.StreamReader()
            for i in range(len(data)):
                r.feed_data(data[i : i + 1])
            r.feed_eof()
            out = []
            while True:
                try:
                    out.append(await skulk.read_packet(r))
                except skulk.ConnectionClosed:
                    return out

        out = asyncio.run(run())
        self.assertEqual(len(out), len(self.names()))
        self.assertEqual(b"".join(h + bytes(a) for h, a in map(encode_packet, out)), data)


class LengthTest(unittest.TestCase):
    """Each length limit of §2, checked before anything else is read."""

    def read(self, data, limits=None):
        async def run():
            r = asyncio.StreamReader()
            r.feed_data(data)  # no EOF: a reader that waited for more would hang
            return await asyncio.wait_for(skulk.read_packet(r, limits), 2)

        return asyncio.run(run())

    def test_prefix_alone_refused(self):
        for h, a, exc in [
            (0, 0, HeaderLengthError),
            (65537, 0, HeaderLengthError),
            (0xFFFFFFFF, 0, HeaderLengthError),
            (10, 16777217, AttachmentLengthError),
        ]:
            with self.subTest(h=h, a=a):
                with self.assertRaises(exc):
                    self.read(struct.pack(">II", h, a))

    def test_configured_limits(self):
        with self.assertRaises(HeaderLengthError):
            self.read(struct.pack(">II", 2049, 0), Limits(2048, 4096))
        with self.assertRaises(AttachmentLengthError):
            self.read(struct.pack(">II", 10, 4097), Limits(2048, 4096))

    def test_exactly_the_limits(self):
        f = {"t": "frame", "call_id": "c", "direction": "caller_to_provider", "sequence": 1, "kind": "chunk",
             "media": {"kind": "inline", "media_type": "a/b"}}
        hb = msgpack.packb(f)
        pad = 65536 - len(hb) - 3
        f["zz"] = "x" * (pad - 3)  # str16 + key
        hb = msgpack.packb(f)
        self.assertEqual(len(hb), 65536)
        p = self.read(struct.pack(">II", len(hb), 16777216) + hb + bytes(16777216))
        self.assertEqual(len(p.media.data), 16777216)

    def test_effective_limits(self):
        self.assertEqual(Limits().effective(), Limits(65536, 16777216))
        self.assertEqual(Limits(1 << 30, 1 << 30).effective(), Limits(1 << 20, 1 << 28))
        self.assertEqual(Limits(2048, 0).min(Limits(0, 4096)), Limits(2048, 4096))
        self.assertEqual(decode_packet(pkt({"t": "startup", "protocol": 1, "limits": {"max_header": 1 << 40}})).limits.max_header, (1 << 32) - 1)

    def test_encoder_refuses_over_limits(self):
        f = StreamFrame("c", "provider_to_caller", 1, "chunk", {"pad": "x" * 3000})
        with self.assertRaises(HeaderLengthError):
            encode_packet(f, Limits(2048))
        f = StreamFrame("c", "provider_to_caller", 1, "chunk", media=InlineMedia(bytes(4097), "a/b"))
        with self.assertRaises(AttachmentLengthError):
            encode_packet(f, Limits(0, 4096))

    def test_field_lengths(self):
        ok = StreamFrame("é" * 128, "caller_to_provider", 1, "failed", error=StreamError("provider_error", "ü" * 2048))
        ok.lifecycle_shape()
        # Refused when constructed, naming the field.
        for build, field in [
            (lambda: StreamFrame("x" * 129, "caller_to_provider", 1, "chunk", {"a": 1}), "call_id"),
            (lambda: StreamFrame("", "caller_to_provider", 1, "chunk", {"a": 1}), "call_id"),
            (lambda: StreamError("provider_error", "m" * 2049), "error.message"),
            (lambda: InlineMedia(b"", "a" * 257), "media.media_type"),
        ]:
            with self.subTest(field):
                with self.assertRaises(FieldError) as cm:
                    build()
                self.assertEqual(cm.exception.field, field)
        # and by lifecycle_shape after a change.
        ok.call_id = "x" * 129
        with self.assertRaises(FieldError) as cm:
            ok.lifecycle_shape()
        self.assertEqual(cm.exception.field, "call_id")
        deep = {}
        cur = deep
        for _ in range(64):
            cur["d"] = {}
            cur = cur["d"]
        with self.assertRaises(FieldError):  # 65 maps deep
            StreamFrame("c", "caller_to_provider", 1, "chunk", deep)
        ok64 = {}
        cur = ok64
        for _ in range(63):
            cur["d"] = {}
            cur = cur["d"]
        StreamFrame("c", "caller_to_provider", 1, "chunk", ok64).lifecycle_shape()
        # the same bound when reading
        with self.assertRaises(InvalidPacketError):
            decode_packet(pkt({"t": "frame", "call_id": "c", "direction": "caller_to_provider", "sequence": 1, "kind": "chunk", "payload": deep}))
        decode_packet(pkt({"t": "frame", "call_id": "c", "direction": "caller_to_provider", "sequence": 1, "kind": "chunk", "payload": ok64}))
        with self.assertRaises(BadFieldError):
            decode_packet(pkt({"t": "hello", "max_streams": 1, "protocol": [1] * 65}))
        with self.assertRaises(BadFieldError):
            decode_packet(pkt({"t": "hello", "max_streams": 1, "tools": [{"id": "t%d" % i} for i in range(4097)]}))

    def test_tool_id_and_version_lengths(self):
        """A tool descriptor's id is 1..128 characters (the call id rule) and
        its version at most 128, counted in characters, not bytes: refused
        in a hello read (the whole hello: a bad field) and by the encoder."""

        def hello(tool):
            return pkt({"t": "hello", "protocol": [1], "max_streams": 1, "tools": [tool]})

        for tool in [{"id": "é" * 128}, {"id": "t", "version": "ü" * 128}, {"id": "t", "version": ""}]:
            with self.subTest(tool=len(tool["id"]), version=len(tool.get("version", ""))):
                d = decode_packet(hello(tool)).tools[0]
                self.assertEqual((d.id, d.version), (tool["id"], tool.get("version", "")))
                head, _ = encode_packet(wire.Hello([1], "s", 1, 1, Limits(), [d]))
                self.assertEqual(decode_packet(head).tools, [d])
        for tool, fld in [
            ({"id": "é" * 129}, "tools.id"),
            ({"id": ""}, "tools.id"),
            ({"id": "t", "version": "ü" * 129}, "tools.version"),
        ]:
            with self.subTest(fld, tool=len(tool["id"]), version=len(tool.get("version", ""))):
                with self.assertRaises(BadFieldError) as cm:
                    decode_packet(hello(tool))
                self.assertEqual(str(cm.exception), "hello: tools")
                with self.assertRaises(FieldError) as cm:
                    encode_packet(wire.Hello([1], "s", 1, 1, Limits(), [wire.ToolDescriptor(tool["id"], tool.get("version", ""))]))
                self.assertEqual(cm.exception.field, fld)

    def test_main_refuses_a_tool_the_host_would_refuse(self):
        """skulk.main raises FieldError for a tool id or version over 128
        characters before it does anything else (outside a host it would
        otherwise exit 2 for want of fds 3 and 4)."""
        root = os.path.dirname(os.path.dirname(skulk.__file__))
        for args, fld in [('"x" * 129, h', "tools.id"), ('"x", h, version="v" * 129', "tools.version")]:
            with self.subTest(fld):
                code = (
                    "import sys; sys.path.insert(0, %r)\n"
                    "import skulk\n"
                    "async def h(call, frames):\n    yield call.completed()\n"
                    "try:\n    skulk.main([skulk.Tool(%s)])\n"
                    "except skulk.FieldError as e:\n    print(e.field); sys.exit(7)\n"
                ) % (root, args)
                r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                                   env={k: v for k, v in os.environ.items() if not k.startswith("SKULK_")})
                self.assertEqual((r.returncode, r.stdout.strip()), (7, fld), r.stderr)

    def test_sanitize_message(self):
        self.assertEqual(skulk.sanitize_message("a\udcff\udcfeb"), "a\ufffdb")
        self.assertEqual(len(skulk.sanitize_message("é" * 3000)), 2048)


F = {"t": "frame", "call_id": "c", "direction": "caller_to_provider", "sequence": 1, "kind": "chunk", "payload": {"a": 1}}


def w(**kw):
    d = dict(F)
    for k, v in kw.items():
        if v is wire:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def raw_map(*kv):
    return bytes([0x80 | (len(kv) // 2)]) + b"".join(kv)


def s(x):
    return msgpack.packb(x)


class DecodeTest(unittest.TestCase):
    def test_protocol_errors(self):
        for name, b, exc in [
            ("array", pkt(["t", "frame"]), MalformedHeaderError),
            ("two_maps", pkt(msgpack.packb(F) * 2, raw=True), MalformedHeaderError),
            ("trailing", pkt(msgpack.packb(F) + b"\xc0", raw=True), MalformedHeaderError),
            ("truncated", pkt(msgpack.packb(F)[:-2], raw=True), MalformedHeaderError),
            ("int_key", pkt(raw_map(s("t"), s("frame"), b"\x07", s("x")), raw=True), MalformedHeaderError),
            ("bin_key", pkt(raw_map(b"\xc4\x01t", s("frame")), raw=True), MalformedHeaderError),
            ("no_t", pkt(w(t=wire)), UnknownTypeError),
            ("t_case", pkt(w(t="Frame")), UnknownTypeError),
            ("t_int", pkt(w(t=3)), UnknownTypeError),
            ("att_payload", pkt(F, b"xyz"), UnexpectedAttachmentError),
            ("att_ping", pkt({"t": "ping", "nonce": 1}, b"x"), UnexpectedAttachmentError),
            ("ping_negative", pkt({"t": "ping", "nonce": -1}), BadFieldError),
            ("cancel_no_id", pkt({"t": "cancel"}), BadFieldError),
            ("drain_negative", pkt({"t": "drain", "grace_ms": -1}), BadFieldError),
            ("hello_no_max_streams", pkt({"t": "hello", "protocol": [1]}), BadFieldError),
            ("startup_protocol_str", pkt({"t": "startup", "protocol": "1"}), BadFieldError),
        ]:
            with self.subTest(name):
                with self.assertRaises(exc):
                    decode_packet(b)
                self.assertTrue(issubclass(exc, skulk.ProtocolError))

    def test_invalid_frames(self):
        deep = {}
        cur = deep
        for _ in range(70):
            cur["d"] = {}
            cur = cur["d"]
        for name, h, field in [
            ("gap_in_shape", w(sequence=0), "sequence"),
            ("started_payload", w(kind="started", sequence=0), "payload"),
            ("chunk_empty", w(payload=wire), "payload"),
            ("failed_no_error", w(kind="failed", payload=wire), "error"),
            ("failed_cancelled", w(kind="failed", payload=wire, error={"code": "cancelled"}), "error.code"),
            ("cancelled_timeout", w(kind="cancelled", payload=wire, error={"code": "timeout"}), "error.code"),
            ("unknown_kind", w(kind="progress"), "kind"),
            ("unknown_direction", w(direction="sideways"), "direction"),
            ("synthetic", w(synthetic=True), "synthetic"),
            ("payload_bin", w(payload={"b": b"\x01"}), "payload"),
            ("payload_deep", w(payload=deep), "payload"),
            ("payload_array", w(payload=[1]), "payload"),
            ("payload_bad_utf8", w(payload={"s": "a\udcffb"}), "payload"),
            ("sequence_negative", w(sequence=-1), "sequence"),
            ("sequence_string", w(sequence="1"), "sequence"),
            ("message_2049", w(kind="failed", payload=wire, error={"code": "provider_error", "message": "ü" * 2049}), "error.message"),
            ("code_unknown", w(kind="failed", payload=wire, error={"code": "oops"}), "error.code"),
            ("sample_rate_0", w(payload=wire, media={"kind": "inline", "media_type": "a/b", "sample_rate": 0}), "media.sample_rate"),
            ("data_key", w(payload=wire, media={"kind": "inline", "media_type": "a/b", "data": b"x"}), "media.data"),
            ("sha_upper", w(payload=wire, media={"kind": "blob", "blob_id": "b", "size_bytes": 1, "sha256": "A" * 64, "media_type": "x"}), "media.sha256"),
            ("media_kind", w(payload=wire, media={"kind": "stream", "media_type": "a/b"}), "media.kind"),
        ]:
            with self.subTest(name):
                hb = msgpack.packb(h, use_bin_type=True, unicode_errors="surrogateescape")
                with self.assertRaises(InvalidPacketError) as cm:
                    decode_packet(struct.pack(">II", len(hb), 0) + hb)
                self.assertEqual(cm.exception.error.field, field)
                self.assertEqual(cm.exception.call_id, "c")

    def test_duplicate_keys(self):
        # the last occurrence wins; a wrong-typed earlier one is an error
        b = raw_map(s("sequence"), s(5), s("t"), s("frame"), s("call_id"), s("c"), s("direction"), s("caller_to_provider"),
                    s("sequence"), s(1), s("kind"), s("chunk"), s("payload"), s({"a": 1}))
        self.assertEqual(decode_packet(pkt(b, raw=True)).sequence, 1)
        b = raw_map(s("kind"), s(5), s("t"), s("frame"), s("call_id"), s("c"), s("direction"), s("caller_to_provider"),
                    s("sequence"), s(1), s("kind"), s("chunk"), s("payload"), s({"a": 1}))
        with self.assertRaises(InvalidPacketError):
            decode_packet(pkt(b, raw=True))
        b = raw_map(s("nonce"), s(1), s("zzz"), b"\xc4\x02\xff\xfe", s("nonce"), s(9), s("t"), s("ping"))
        self.assertEqual(decode_packet(pkt(b, raw=True)).nonce, 9)

    def test_edge_valid(self):
        p = decode_packet(pkt(w(synthetic=False, extra=b"\x01", media={"kind": "inline", "media_type": "a/b", "data": None,
                                                                       "timestamp_seconds": 0, "zz": 1}), b"abc"))
        self.assertEqual(p.media.data, b"abc")
        self.assertEqual(p.media.timestamp_seconds, 0.0)
        p = decode_packet(pkt({"t": "ping", "nonce": (1 << 64) - 1}))
        self.assertEqual(p.nonce, (1 << 64) - 1)
        p = decode_packet(pkt({"t": "startup", "protocol": 1}))
        self.assertEqual(p.cancel_grace_ms, 1000)

    def test_invalid_invokes(self):
        base = {"t": "invoke", "call_id": "i", "tool_id": "echo", "arguments": {}, "timeout_ms": 0}
        for name, h, cid in [
            ("no_args", {k: v for k, v in base.items() if k != "arguments"}, "i"),
            ("args_nil", dict(base, arguments=None), "i"),
            ("args_array", dict(base, arguments=[1]), "i"),
            ("tool_129", dict(base, tool_id="t" * 129), "i"),
            ("timeout_negative", dict(base, timeout_ms=-5), "i"),
            ("trace_int", dict(base, trace={"traceparent": 5}), "i"),
            ("call_id_bad", dict(base, call_id=""), None),
        ]:
            with self.subTest(name):
                with self.assertRaises(InvalidPacketError) as cm:
                    decode_packet(pkt(h))
                self.assertEqual(cm.exception.call_id, cid)
                self.assertEqual(cm.exception.packet_type, "invoke")

    def test_invalid_frame_attachment_read(self):
        # decision 9: an invalid inline frame has its attachment consumed
        bad = pkt(w(payload=wire, media={"kind": "inline", "media_type": "a/b", "sample_rate": 0}), b"abc")
        good = pkt({"t": "end", "call_id": "c"})

        async def run():
            r = asyncio.StreamReader()
            r.feed_data(bad + good)
            r.feed_eof()
            with self.assertRaises(InvalidPacketError):
                await skulk.read_packet(r)
            return await skulk.read_packet(r)

        self.assertIsInstance(asyncio.run(run()), StreamEnd)

    def test_write_packet_raw_attachment(self):
        async def run():
            got = []

            async def serve(reader, writer):
                got.append(await skulk.read_packet(reader))
                writer.close()

            srv = await asyncio.start_server(serve, "127.0.0.1", 0)
            port = srv.sockets[0].getsockname()[1]
            r, wr = await asyncio.open_connection("127.0.0.1", port)
            data = bytes(range(256)) * 4096
            await skulk.write_packet(wr, StreamFrame("c", "provider_to_caller", 1, "chunk", media=InlineMedia(data, "a/b")))
            await r.read()
            wr.close()
            srv.close()
            await srv.wait_closed()
            return got[0], data

        p, data = asyncio.run(run())
        self.assertEqual(p.media.data, data)

    def test_encoder_refuses(self):
        with self.assertRaises(FieldError):
            StreamFrame("c", "provider_to_caller", 1, "chunk", {"x": float("nan")})
        with self.assertRaises(FieldError) as cm:
            StreamFrame("c", "provider_to_caller", 1, "chunk", {"x": 1}, synthetic=True)  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "synthetic")
        f = StreamFrame("c", "provider_to_caller", 1, "chunk", {"x": 1})
        assert f.payload is not None
        f.payload["x"] = float("nan")  # changed after construction: the encoder checks again
        with self.assertRaises(FieldError):
            encode_packet(f)


if __name__ == "__main__":
    unittest.main()
