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
// Each mechanism that keeps a packet from the flusher carries its measured
// reason, the figure and the command, where it is declared: the quiet gap
// and the sender's own write of a reply at quietGap, Request at Request,
// Cork at Cork, the sender's own write of an attachment at
// writeCurContext. docs/architecture.md ("Writing packets") lists them.
package coalesce
