"""The fence of docs/protocol.md §4.2: each refusal, in order."""

import unittest

from skulk import (
    AfterTerminalError,
    DuplicateSequenceError,
    DuplicateTerminalError,
    SequenceGapError,
    Sequence,
    SequenceError,
    StaleCallError,
    StreamError,
    StreamFrame,
    WrongDirectionError,
)

C = "caller_to_provider"
P = "provider_to_caller"


def f(seq, kind="chunk", call="c", d=C):
    err = StreamError("provider_error", "x") if kind == "failed" else None
    return StreamFrame(call, d, seq, kind, {"a": 1} if kind == "chunk" else None, error=err)


class FenceTest(unittest.TestCase):
    def test_accepts_in_order(self):
        s = Sequence("c", C)
        for fr in (f(0, "started"), f(1), f(2), f(3, "completed")):
            s.accept(fr)
        self.assertTrue(s.closed)
        self.assertEqual(s.next_sequence, 4)

    def test_provider_starts_at_one(self):
        s = Sequence("c", P, next_sequence=1)
        s.accept(f(1, d=P))
        with self.assertRaises(DuplicateSequenceError):
            s.accept(f(1, d=P))

    def test_refusals(self):
        for name, pre, bad, exc in [
            ("stale_call", [f(0, "started")], f(1, call="other"), StaleCallError),
            ("wrong_direction", [f(0, "started")], f(1, d=P), WrongDirectionError),
            ("duplicate_terminal", [f(0, "started"), f(1, "completed")], f(2, "cancelled"), DuplicateTerminalError),
            ("after_terminal", [f(0, "started"), f(1, "completed")], f(2), AfterTerminalError),
            ("gap", [f(0, "started")], f(3), SequenceGapError),
            ("duplicate", [f(0, "started"), f(1)], f(1), DuplicateSequenceError),
            # the order of the rules: a stale call is refused as such even with a gap
            ("stale_before_gap", [f(0, "started")], f(9, call="other"), StaleCallError),
            ("direction_before_terminal", [f(0, "started"), f(1, "completed")], f(2, d=P), WrongDirectionError),
            ("terminal_before_gap", [f(0, "started"), f(1, "completed")], f(7, "failed"), DuplicateTerminalError),
        ]:
            with self.subTest(name):
                s = Sequence("c", C)
                for p in pre:
                    s.accept(p)
                before = (s.next_sequence, s.closed)
                with self.assertRaises(exc) as cm:
                    s.accept(bad)
                self.assertIsInstance(cm.exception, SequenceError)
                self.assertEqual((s.next_sequence, s.closed), before, "a refused frame changes nothing")
                for other in (StaleCallError, WrongDirectionError, DuplicateTerminalError, AfterTerminalError, SequenceGapError, DuplicateSequenceError):
                    if other is not exc:
                        self.assertNotIsInstance(cm.exception, other)


if __name__ == "__main__":
    unittest.main()
