package eventstore

import (
	"context"

	"github.com/skulkrt/skulk/calllog"
)

// ObserverFunc adapts a function to calllog.Observer, for the module's
// tests.
type ObserverFunc func(ctx context.Context, e calllog.Event) error

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e calllog.Event) error { return f(ctx, e) }
