"""The per-direction fence of docs/protocol.md §4.2."""

from __future__ import annotations

from typing import Literal

from .frames import DIRECTIONS, TERMINAL_KINDS, StreamFrame

__all__ = [
    "SequenceError",
    "StaleCall",
    "WrongDirection",
    "DuplicateTerminal",
    "AfterTerminal",
    "Gap",
    "Duplicate",
    "Sequence",
]


class SequenceError(ValueError):
    """A frame the fence refused. Each rule has its own subclass; the
    message names sequence numbers, never the frame's content."""


class StaleCall(SequenceError):
    """The frame belongs to another call."""


class WrongDirection(SequenceError):
    """The frame travels the other way."""


class DuplicateTerminal(SequenceError):
    """A second terminal after the direction's terminal."""


class AfterTerminal(SequenceError):
    """A non-terminal frame after the direction's terminal."""


class Gap(SequenceError):
    """The sequence is above the next expected one."""


class Duplicate(SequenceError):
    """The sequence is below the next expected one (a replay)."""


class Sequence:
    """Fence one direction of one call by call identity, direction,
    sequence and terminal.

    The caller direction starts at 0 (the host sends the caller's
    started); the provider direction starts at 1 on the wire (the host
    owns the provider's started)."""

    __slots__ = ("call_id", "direction", "next_sequence", "closed")

    def __init__(
        self,
        call_id: str,
        direction: Literal["caller_to_provider", "provider_to_caller"],
        *,
        next_sequence: int = 0,
    ) -> None:
        if direction not in DIRECTIONS:
            raise ValueError("direction: unknown value")
        self.call_id = call_id
        self.direction = direction
        self.next_sequence = next_sequence
        self.closed = False

    def accept(self, frame: StreamFrame) -> None:
        """Admit frame if it is this direction's next one, and close the
        fence on a terminal. The rules apply in order: stale call, wrong
        direction, duplicate terminal / after terminal, gap, duplicate. A
        refused frame changes nothing."""
        if frame.call_id != self.call_id:
            raise StaleCall("frame of another call")
        if frame.direction != self.direction:
            raise WrongDirection("frame of the other direction")
        terminal = frame.kind in TERMINAL_KINDS
        if self.closed:
            if terminal:
                raise DuplicateTerminal("duplicate terminal")
            raise AfterTerminal("frame after terminal")
        if frame.sequence > self.next_sequence:
            raise Gap(f"sequence gap: got {frame.sequence}, want {self.next_sequence}")
        if frame.sequence < self.next_sequence:
            raise Duplicate(f"duplicate sequence: got {frame.sequence}, want {self.next_sequence}")
        self.next_sequence += 1
        if terminal:
            self.closed = True
