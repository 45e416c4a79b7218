"""The language-neutral negative vectors of wire/testdata/negative/ (its
README says what each outcome means), read by both Python readers: the
asyncio one (skulk.read_packet) and the child's own connection reader
(skulk._conn.Conn, over a real Unix socket pair)."""

import asyncio
import json
import os
import socket
import unittest

import skulk
from skulk import wire
from skulk._conn import Conn
from skulk.frames import InlineMedia, StreamEnd, StreamFrame
from skulk.wire import Limits, Ping, decode_packet

NEGATIVE = os.path.join(os.path.dirname(__file__), "..", "..", "wire", "testdata", "negative")
GOLDEN_PING = os.path.join(os.path.dirname(__file__), "..", "..", "wire", "testdata", "golden", "ping.bin")

# The manifest's rules of protocol_error and the exception each is.
RULES = {
    "header_length": skulk.HeaderLengthError,
    "attachment_length": skulk.AttachmentLengthError,
    "malformed_header": skulk.MalformedHeaderError,
    "unknown_type": skulk.UnknownTypeError,
    "unexpected_attachment": skulk.UnexpectedAttachmentError,
    "bad_field": skulk.BadFieldError,
}

# The packet type of each invalid_packet type.
TYPES = {"frame": StreamFrame, "invoke": wire.StreamInvoke, "end": StreamEnd}


def manifest():
    with open(os.path.join(NEGATIVE, "vectors.json")) as f:
        return json.load(f)


def vector_bytes(v):
    with open(os.path.join(NEGATIVE, v["file"]), "rb") as f:
        return f.read()


def limits_of(v):
    return Limits(v["limits"]["max_header"], v["limits"]["max_attachment"])


async def _stream_reads(data, limits, n, eof):
    """Up to n results of skulk.read_packet over data: a packet or the
    exception raised. Without eof the reader is never told the data ended,
    so a reader that waited for more would time out."""
    r = asyncio.StreamReader()
    r.feed_data(data)
    if eof:
        r.feed_eof()
    out = []
    for _ in range(n):
        try:
            out.append(await asyncio.wait_for(skulk.read_packet(r, limits), 2))
        except (skulk.ProtocolError, skulk.InvalidPacketError, skulk.ConnectionClosed, asyncio.TimeoutError) as e:
            out.append(e)
            if not isinstance(e, skulk.InvalidPacketError):
                break
    return out


async def _conn_reads(data, limits, n, eof):
    """The same through the child's Conn on one end of a socket pair, the
    data written on the other."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        loop = asyncio.get_running_loop()
        c = Conn(a, loop, limits.effective())
        b.setblocking(False)
        await loop.sock_sendall(b, data)
        if eof:
            b.shutdown(socket.SHUT_WR)
        out = []
        for _ in range(n):
            try:
                out.append(await asyncio.wait_for(c.read_packet(), 2))
            except (skulk.ProtocolError, skulk.InvalidPacketError, skulk.ConnectionClosed, asyncio.TimeoutError) as e:
                out.append(e)
                if not isinstance(e, skulk.InvalidPacketError):
                    break
        return out
    finally:
        a.close()
        b.close()


READERS = {
    "read_packet": _stream_reads,
    "Conn": _conn_reads,
}


def as_json(p):
    """p as the manifest shows a packet: its header as our encoder writes
    it, through JSON."""
    h, _ = wire._header(p)
    return json.loads(json.dumps(h))


class NegativeVectorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = manifest()
        with open(GOLDEN_PING, "rb") as f:
            cls.ping = f.read()

    def test_manifest_covers_every_file(self):
        files = {v["file"] for v in self.m["vectors"]}
        on_disk = {n for n in os.listdir(NEGATIVE) if n.endswith(".bin")}
        self.assertEqual(files, on_disk)
        outcomes = {v["outcome"] for v in self.m["vectors"]}
        self.assertEqual(outcomes, {"protocol_error", "invalid_packet", "accept"})
        self.assertEqual(
            self.m["limits"],
            {
                "default": {"max_header": wire.DEFAULT_MAX_HEADER, "max_attachment": wire.DEFAULT_MAX_ATTACHMENT},
                "hard_ceiling": {"max_header": wire.CEILING_MAX_HEADER, "max_attachment": wire.CEILING_MAX_ATTACHMENT},
            },
        )

    def vectors(self, outcome):
        vs = [v for v in self.m["vectors"] if v["outcome"] == outcome]
        self.assertGreater(len(vs), 10, outcome)
        return vs

    def test_protocol_errors(self):
        """Refused with the rule's error; the prefix-only files with no EOF
        after them, so a reader that read on would hang instead."""
        for v in self.vectors("protocol_error"):
            want = RULES[v["rule"]]
            data = vector_bytes(v)
            for rname, read in READERS.items():
                with self.subTest(v["name"], reader=rname):
                    got = asyncio.run(read(data, limits_of(v), 1, eof=False))[0]
                    self.assertIs(type(got), want, f"{v['name']}: {got!r}")
            with self.subTest(v["name"], reader="decode_packet"):
                with self.assertRaises(want):
                    decode_packet(data, limits_of(v))

    def test_invalid_packets(self):
        """Refused as the packet type named, blaming the call id and the
        field named, and the reader stays in step: a ping after it is read."""
        for v in self.vectors("invalid_packet"):
            data = vector_bytes(v)
            want_cid = v["call_id"] or None
            for rname, read in READERS.items():
                with self.subTest(v["name"], reader=rname):
                    got = asyncio.run(read(data + self.ping, limits_of(v), 2, eof=True))
                    self.assertEqual(len(got), 2, got)
                    e = got[0]
                    self.assertIsInstance(e, skulk.InvalidPacketError, f"{v['name']}: {e!r}")
                    self.assertEqual(e.packet_type, v["type"])
                    self.assertEqual(e.call_id, want_cid)
                    self.assertEqual(e.error.field, v["field"])
                    self.assertIsInstance(got[1], Ping)
            self.assertIn(v["type"], TYPES)

    def test_accepts(self):
        """Read whole and equal, field by field, to the manifest's packet."""
        for v in self.vectors("accept"):
            data = vector_bytes(v)
            att = bytes.fromhex(v.get("attachment_hex", ""))
            for rname, read in READERS.items():
                with self.subTest(v["name"], reader=rname):
                    got = asyncio.run(read(data, limits_of(v), 1, eof=False))[0]
                    self.assertNotIsInstance(got, Exception, f"{v['name']}: {got!r}")
                    self.assertEqual(as_json(got), v["packet"])
                    media = getattr(got, "media", None)
                    if att:
                        self.assertIsInstance(media, InlineMedia)
                    if isinstance(media, InlineMedia):
                        self.assertEqual(bytes(media.data), att)
            with self.subTest(v["name"], reader="decode_packet"):
                self.assertEqual(as_json(decode_packet(data, limits_of(v))), v["packet"])


if __name__ == "__main__":
    unittest.main()
