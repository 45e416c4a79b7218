"""The sequence fence of docs/protocol.md §4.2."""

from __future__ import annotations

from .errors import (
    AfterTerminalError,
    DuplicateSequenceError,
    DuplicateTerminalError,
    FieldError,
    SequenceGapError,
    StaleCallError,
    WrongDirectionError,
)
from .frames import DIRECTIONS, TERMINAL_KINDS, Direction, StreamFrame

__all__ = ["Sequence"]


class Sequence:
    """Fence one direction of one call by call identity, direction,
    sequence and terminal.

    The caller direction starts at 0 (the host sends the caller's
    started); the provider direction starts at 1 on the wire (the host
    owns the provider's started). Not safe for concurrent use: one
    reader (or one writer) owns it."""

    __slots__ = ("call_id", "direction", "next_sequence", "closed")

    def __init__(self, call_id: str, direction: Direction, *, next_sequence: int = 0) -> None:
        """Set the initial sequence for one independently closed stream
        direction. Raises FieldError for an unknown direction or a
        negative next_sequence."""
        if direction not in DIRECTIONS:
            raise FieldError("direction", "unknown value")
        if type(next_sequence) is not int or next_sequence < 0:
            raise FieldError("next_sequence", "must be >= 0")
        self.call_id = call_id
        self.direction = direction
        #: The sequence the next frame must carry.
        self.next_sequence = next_sequence
        #: Whether the direction's terminal was accepted.
        self.closed = False

    def accept(self, frame: StreamFrame) -> None:
        """Admit frame if it is this direction's next one, and close the
        fence on a terminal. The rules apply in order: stale call
        (StaleCallError), wrong direction (WrongDirectionError), duplicate
        terminal / after terminal (DuplicateTerminalError,
        AfterTerminalError), gap (SequenceGapError), duplicate
        (DuplicateSequenceError); all are SequenceErrors. A refused frame
        changes nothing."""
        if frame.call_id != self.call_id:
            raise StaleCallError("frame of another call")
        if frame.direction != self.direction:
            raise WrongDirectionError("frame of the other direction")
        terminal = frame.kind in TERMINAL_KINDS
        if self.closed:
            if terminal:
                raise DuplicateTerminalError("duplicate terminal")
            raise AfterTerminalError("frame after terminal")
        if frame.sequence > self.next_sequence:
            raise SequenceGapError(f"sequence gap: got {frame.sequence}, want {self.next_sequence}")
        if frame.sequence < self.next_sequence:
            raise DuplicateSequenceError(f"duplicate sequence: got {frame.sequence}, want {self.next_sequence}")
        self.next_sequence += 1
        if terminal:
            self.closed = True
