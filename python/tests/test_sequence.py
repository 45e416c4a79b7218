"""The fence of docs/protocol.md §4.2: each refusal, in order."""

import unittest

from skulk import (
    AfterTerminal,
    Duplicate,
    DuplicateTerminal,
    Gap,
    Sequence,
    SequenceError,
    StaleCall,
    StreamFrame,
    WrongDirection,
)

C = "caller_to_provider"
P = "provider_to_caller"


def f(seq, kind="chunk", call="c", d=C):
    return StreamFrame(call, d, seq, kind, {"a": 1} if kind == "chunk" else None)


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
        with self.assertRaises(Duplicate):
            s.accept(f(1, d=P))

    def test_refusals(self):
        for name, pre, bad, exc in [
            ("stale_call", [f(0, "started")], f(1, call="other"), StaleCall),
            ("wrong_direction", [f(0, "started")], f(1, d=P), WrongDirection),
            ("duplicate_terminal", [f(0, "started"), f(1, "completed")], f(2, "cancelled"), DuplicateTerminal),
            ("after_terminal", [f(0, "started"), f(1, "completed")], f(2), AfterTerminal),
            ("gap", [f(0, "started")], f(3), Gap),
            ("duplicate", [f(0, "started"), f(1)], f(1), Duplicate),
            # the order of the rules: a stale call is refused as such even with a gap
            ("stale_before_gap", [f(0, "started")], f(9, call="other"), StaleCall),
            ("direction_before_terminal", [f(0, "started"), f(1, "completed")], f(2, d=P), WrongDirection),
            ("terminal_before_gap", [f(0, "started"), f(1, "completed")], f(7, "failed"), DuplicateTerminal),
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
                for other in (StaleCall, WrongDirection, DuplicateTerminal, AfterTerminal, Gap, Duplicate):
                    if other is not exc:
                        self.assertNotIsInstance(cm.exception, other)


if __name__ == "__main__":
    unittest.main()
