// Package frame holds the unit of every Skulk call: the Frame, one
// sequenced step of one direction of one call, with the types it carries
// (Payload, InlineMedia, BlobMedia, Error) and the rules of docs/protocol.md
// §3 and §4 that make a frame valid.
//
// It is the bottom layer of Skulk: package wire puts frames on a connection,
// package sequence orders them, and the host and child packages build on
// those. It imports nothing else of Skulk's but its own frame/mpack, the
// MessagePack appender and reader a Payload is built and checked with.
//
// A call has two directions, caller_to_provider and provider_to_caller.
// Each direction is a sequence of frames numbered from 0: a started frame,
// any number of chunks, and exactly one terminal (completed, failed or
// cancelled). What a frame may carry depends on its kind (the "shape
// table"):
//
//	kind       payload             media   error
//	started    no                  no      no
//	chunk      payload or media or both     no
//	completed  optional            no      no
//	failed     no                  no      required, code ≠ cancelled
//	cancelled  no                  no      optional, code = cancelled
//
// Frame.Validate checks the shape table and every field constraint and
// returns a *FieldError naming the field at fault; its message never holds
// the field's value, so it can be logged and sent to a peer. The
// constructors (NewStarted, NewChunk, NewCompleted, NewFailed, NewCancelled)
// validate what they build, so the common frames cannot be built wrong.
//
// Values of this package are plain data: a Frame may be copied and shared
// between goroutines as long as nobody modifies it; nothing in Skulk
// modifies a frame or its payload after building it.
package frame
