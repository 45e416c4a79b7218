package calllog

// Options configures a host's call log (host.Config.CallLog): who reads it
// beside each call's own watchers, and what they are given. The zero value
// records every call for its watchers only (Call.Events), with no observer
// and no journal.
type Options struct {
	// Writer names the host in events and claims; "" means a random
	// 16-hex-digit name. A restarted host should use a new one.
	Writer string
	// FullContent gives observers and journals payloads and media bytes
	// (Content.Value, MediaInfo.Data, a blob's id and digest, argument
	// fragments); false gives them only types and sizes.
	FullContent bool
	// Observers are given the events of every call of the host.
	Observers []Observer
	// Journal keeps every tree's log; nil means none.
	Journal *Journal
	// History bounds the events each call keeps for its watchers
	// (Call.Events): a call's first History events, while they hold less
	// than HistoryBytes, then its end event, whose After shows the loss.
	// 0 means 64, which holds every event of a call with a few dozen small
	// chunks. Each kept event holds its payload but never media data; a
	// frame's event (input or output, most of a stream's) is kept in about
	// 120 bytes besides its payload and built whole when Call.Events reads
	// it. History is the host's memory per open stream (about 8 KiB of
	// events at 64): a stream that must be watched whole is better
	// followed by an Observer, which is given every event as it comes.
	History int
	// Redact names payload keys whose values observers and journals are
	// never given: at any depth of a payload kept under FullContent
	// (arguments, chunks, the caller's frames, values), the value of a
	// key named here is replaced with the string "[redacted]", and the
	// kept content is marked Redacted. Streamed argument fragments are
	// text, not objects, so with Redact set they are kept as their sizes
	// only. Matching is exact and case-sensitive. A call's own watchers
	// (Call.Events) still see its full content.
	Redact []string
	// HistoryBytes bounds the bytes each call's history keeps, whatever
	// History allows: once a call's kept events hold HistoryBytes (each
	// counts about 320 bytes plus its payload), only its end event is
	// kept. Media data never counts and is never kept there: a history's
	// MediaInfo has the media's kind, type, size and, for a blob, its id
	// and SHA-256, not its bytes (Recv gave them to the caller). 0 means
	// 1 MiB; values above 1 GiB mean 1 GiB.
	HistoryBytes int
}
