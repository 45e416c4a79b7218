// Package coalesce is the packet writer the host and the child SDK use on
// every connection: a wire packet writer that coalesces the packets queued
// while a write is under way into the next vectored write, never holding a
// packet back to wait for a later one (docs/protocol.md, "Packets").
//
// One Writer belongs to one connection and owns one goroutine, the
// flusher. Write is the one way to send packets; its Mode says whether the
// sender may write them itself (a request or a reply, which has nothing to
// be coalesced with) or leaves them to the flusher (a stream). TryWrite is
// the non-blocking form the host's Send tries first. Cork and
// Uncork make a few packets written by one goroutine one after the other
// (a terminal and its end) leave in one write.
//
// Why the sender writes its own packet where it can, with the measured
// figure for each mode, is said at quietGap and in docs/architecture.md
// ("Writing packets").
package coalesce
