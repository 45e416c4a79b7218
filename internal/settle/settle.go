// Package settle carries, from the call log's writer (internal/recorder) to
// package calllog, the one thing the writer must set on a
// *calllog.JournalError and cannot reach from outside calllog: the wait
// that calllog.Settle runs.
package settle

import "context"

// Attach sets the wait of err, a *calllog.JournalError, to wait. Package
// calllog sets Attach when it is initialised, before any package that
// imports it can run; nothing else sets it.
var Attach func(err error, wait func(context.Context) error)
