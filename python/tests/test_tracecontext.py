"""W3C trace context as the provider reads it from an invoke's trace map:
the same verdicts as the Go SDK's reader (internal/spanctx, whose test
compares it with OpenTelemetry's propagators)."""

import unittest

from skulk import StreamInvoke, TraceContext
from skulk.tracecontext import parse_baggage, parse_trace_context, parse_traceparent, parse_tracestate

TID = "4bf92f3577b34da6a3ce929d0e0e4736"
SID = "00f067aa0ba902b7"
TP = f"00-{TID}-{SID}-01"


class TraceParentTest(unittest.TestCase):
    def test_valid(self):
        self.assertEqual(parse_traceparent(TP), (TID, SID, 1))
        self.assertEqual(parse_traceparent(f"00-{TID}-{SID}-00"), (TID, SID, 0))
        # A later version may carry more after a dash.
        self.assertEqual(parse_traceparent(f"01-{TID}-{SID}-01-extra"), (TID, SID, 1))
        self.assertEqual(parse_traceparent(f"cc-{TID}-{SID}-09"), (TID, SID, 9))

    def test_invalid(self):
        for tp in [
            "",
            "garbage",
            None,
            7,
            f"00-{TID}-{SID}-01-extra",  # version 00 has no more
            f"ff-{TID}-{SID}-01",  # version ff is invalid
            f"00-{'0' * 32}-{SID}-01",  # all-zero trace id
            f"00-{TID}-{'0' * 16}-01",  # all-zero span id
            f"00-{TID.upper()}-{SID}-01",  # upper case
            f"00-{TID}-{SID}",  # no flags
            f"00-{TID}-{SID}-0g",
            f"0x-{TID}-{SID}-01",
            f"01-{TID}-{SID}-01x",  # more without a dash
            f"00_{TID}-{SID}-01",
            f"00-{TID[:-1]}-{SID}-01",
        ]:
            with self.subTest(tp=tp):
                self.assertIsNone(parse_traceparent(tp))


class TraceStateTest(unittest.TestCase):
    def test_valid(self):
        self.assertEqual(parse_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
                         (("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")))
        self.assertEqual(parse_tracestate(" a=1 ,, tenant@vendor=x y"), (("a", "1"), ("tenant@vendor", "x y")))
        self.assertEqual(parse_tracestate(""), ())
        self.assertEqual(parse_tracestate(None), ())

    def test_invalid(self):
        for ts in ["Upper=1", "a=1,a=2", "a", "a=", "a=b=c", "a=x,", ",".join(f"k{i}=v" for i in range(33)), "1a=x", "a=\x01"]:
            with self.subTest(ts=ts):
                if ts == "a=x,":  # a trailing empty member is allowed
                    self.assertEqual(parse_tracestate(ts), (("a", "x"),))
                else:
                    self.assertEqual(parse_tracestate(ts), ())


class BaggageTest(unittest.TestCase):
    def test_valid(self):
        self.assertEqual(parse_baggage("tenant=acme, user=j%20doe;prop=1"), {"tenant": "acme", "user": "j doe"})
        self.assertEqual(parse_baggage(""), {})

    def test_invalid(self):
        for b in ["tenant", "ten ant=x", "a=b c", "a=\"q\"", ",".join(f"k{i}=v" for i in range(65)), "a=" + "x" * 8200]:
            with self.subTest(b=b[:40]):
                self.assertEqual(parse_baggage(b), {})


class InvokeTest(unittest.TestCase):
    def test_handler_view(self):
        inv = StreamInvoke("c1", "t", trace={"traceparent": TP, "tracestate": "rojo=1", "baggage": "tenant=acme"})
        tc = inv.trace_context
        self.assertIsInstance(tc, TraceContext)
        self.assertEqual((tc.trace_id, tc.span_id, tc.sampled), (TID, SID, True))
        self.assertEqual(tc.tracestate, (("rojo", "1"),))
        self.assertEqual(tc.baggage, {"tenant": "acme"})
        self.assertEqual(tc.traceparent, TP)
        self.assertEqual(inv.baggage, {"tenant": "acme"})

    def test_not_sampled(self):
        tc = parse_trace_context({"traceparent": f"00-{TID}-{SID}-00"})
        self.assertFalse(tc.sampled)
        self.assertEqual(tc.tracestate, ())

    def test_invalid_traceparent_is_ignored(self):
        inv = StreamInvoke("c1", "t", trace={"traceparent": f"00-{'0' * 32}-{SID}-01", "baggage": "tenant=acme"})
        self.assertIsNone(inv.trace_context)
        self.assertEqual(inv.baggage, {"tenant": "acme"})  # baggage stands on its own, as in the Go SDK
        self.assertIsNone(StreamInvoke("c1", "t").trace_context)
        self.assertEqual(StreamInvoke("c1", "t").baggage, {})


if __name__ == "__main__":
    unittest.main()
