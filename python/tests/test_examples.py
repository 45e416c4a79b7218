"""The examples of python/examples (and python/README.md, which shows
them verbatim) run through skulk.testing."""

import importlib.util
import os
import unittest

from skulk import InlineMedia
from skulk.testing import call_tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ExamplesTest(unittest.TestCase):
    def test_upper(self):
        (tool,) = load("upper").TOOLS
        res = call_tool(tool, {}, [{"text": "hello"}, {"text": "world"}])
        self.assertEqual((res.outcome, res.payloads, res.result),
                         ("completed", [{"text": "HELLO"}, {"text": "WORLD"}], {"chunks": 2}))
        res = call_tool(tool, {}, [{"other": 1}])
        self.assertEqual((res.outcome, res.error.code, res.error.message), ("failed", "invalid_frame", "chunk has no text"))

    def test_echo_media(self):
        (tool,) = load("echo_media").TOOLS
        audio = bytes(range(256)) * 1024
        res = call_tool(tool, {}, [InlineMedia(audio, "audio/pcm", "pcm_s16le", 16000, 1, 0.0, 0.25)])
        self.assertEqual(res.outcome, "completed")
        m = res.chunks[0].media
        self.assertEqual((bytes(m.data), m.codec, m.sample_rate, m.duration_seconds), (audio, "pcm_s16le", 16000, 0.25))
        self.assertEqual(res.result, {"bytes": len(audio)})

    def test_nested_call(self):
        """relay calls lookup through a call socket the test serves."""
        import asyncio
        import tempfile

        from skulk import StreamEnd, StreamFrame, StreamInvoke
        from skulk.testing import run_tool
        from skulk.wire import Calls, Limits, ToolDescriptor, read_packet, write_packet

        (tool,) = load("nested_call").TOOLS
        lim = Limits().effective()

        async def host(r, w):
            inv = await read_packet(r, lim)
            while not (await read_packet(r, lim)).is_terminal():
                pass
            await write_packet(w, StreamFrame(inv.call_id, "provider_to_caller", 1, "chunk", {"text": inv.arguments["word"]}), lim)
            await write_packet(w, StreamFrame(inv.call_id, "provider_to_caller", 2, "completed", {"len": 3}), lim)
            await write_packet(w, StreamEnd(inv.call_id), lim)
            w.close()

        async def run():
            with tempfile.TemporaryDirectory(prefix="skc") as d:
                sock = os.path.join(d, "calls.sock")
                server = await asyncio.start_unix_server(host, path=sock)
                try:
                    return await run_tool(tool, {"word": "fox"}, calls=Calls(sock, [ToolDescriptor("lookup")], 1, 1))
                finally:
                    server.close()
                    await server.wait_closed()

        res = asyncio.run(run())
        self.assertEqual((res.outcome, res.payloads, res.result), ("completed", [{"text": "fox"}], {"len": 3}))

    def test_readme_shows_the_examples(self):
        with open(os.path.join(ROOT, "README.md")) as f:
            readme = f.read()
        for name in ("upper", "echo_media", "app_loop", "nested_call"):
            with self.subTest(name):
                with open(os.path.join(EXAMPLES, name + ".py")) as f:
                    self.assertTrue(f.read() in readme, f"python/README.md does not show examples/{name}.py verbatim")


class NameTableTest(unittest.TestCase):
    def test_every_streams_api_name_has_a_test_that_exists(self):
        """Each row of README.md's table of the streams API's names names
        at least one test, and every test it names exists."""
        import importlib
        import re

        with open(os.path.join(ROOT, "README.md")) as f:
            readme = f.read()
        section = readme.split("## The streams API's names in this SDK", 1)[1].split("\n## ", 1)[0]
        rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| streams API") and not r.startswith("| ---")]
        self.assertGreaterEqual(len(rows), 15)
        for row in rows:
            refs = re.findall(r"`(test_\w+(?:\.\w+)+)`", row.rsplit(" | ", 1)[1])
            self.assertTrue(refs, row)
            for ref in refs:
                with self.subTest(ref):
                    mod, *path = ref.split(".")
                    obj = importlib.import_module(mod if __package__ in (None, "") else __package__ + "." + mod)
                    for part in path:
                        obj = getattr(obj, part)
                    self.assertTrue(callable(obj) or isinstance(obj, type))


if __name__ == "__main__":
    unittest.main()
