//go:build noskulk

package compare

import (
	"context"
	"errors"
	"time"
)

// skulkSystem stands in for Skulk while the host package is not there.
type skulkSystem struct {
	sys, bin, dir string
	env           []string
}

var errNoHost = errors.New("skulk: built without the host package (noskulk tag)")

func (*skulkSystem) name() string                                     { return Skulk }
func (*skulkSystem) open(context.Context) (session, error)            { return nil, errNoHost }
func (*skulkSystem) coldStart(context.Context) (time.Duration, error) { return 0, errNoHost }
func (*skulkSystem) crash(context.Context) (time.Duration, error)     { return 0, errNoHost }
func (s *skulkSystem) healthUnderBackpressure(ctx context.Context, streams, pings int) ([]time.Duration, error) {
	return healthWire(ctx, s.bin, s.dir, streams, pings)
}
