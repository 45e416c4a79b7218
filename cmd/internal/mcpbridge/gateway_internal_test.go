package mcpbridge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skulkrt/skulk/host"
)

// TestValidateChildren: NewGateway refuses what cannot keep names apart
// or cannot start, naming the child by index, before starting anything.
func TestValidateChildren(t *testing.T) {
	t.Parallel()
	start := func(context.Context) (*host.Host, error) { require.FailNow(t, "started"); return nil, nil }
	ok := Child{Name: "a", Start: start}
	assert.NoError(t, validateChildren([]Child{{Start: start}}), "a lone unnamed child")
	assert.NoError(t, validateChildren([]Child{ok, {Name: "b-2_C", Start: start}}))
	for name, c := range map[string]struct {
		children []Child
		want     error
	}{
		"none":          {nil, ErrNoChildren},
		"unnamed of 2":  {[]Child{ok, {Start: start}}, ErrChildName},
		"slash":         {[]Child{{Name: "a/b", Start: start}}, ErrChildName},
		"too long":      {[]Child{{Name: strings.Repeat("a", 65), Start: start}}, ErrChildName},
		"taken":         {[]Child{ok, ok}, ErrChildName},
		"no start":      {[]Child{{Name: "a"}}, ErrChildStart},
		"retry":         {[]Child{{Name: "a", Start: start, RetryMin: time.Second, RetryMax: time.Millisecond}}, ErrChildStart},
		"negative wait": {[]Child{{Name: "a", Start: start, RetryMin: -1}}, ErrChildStart},
	} {
		err := validateChildren(c.children)
		assert.ErrorIs(t, err, c.want, name)
		_, gerr := NewGateway(context.Background(), c.children, ServerOptions{})
		assert.ErrorIs(t, gerr, c.want, name)
	}
	assert.Equal(t, "crash-loop", StatusCrashLoop.String())
	assert.Equal(t, "ChildStatus(9)", ChildStatus(9).String())
}

// TestCloseConcurrentWaits: a Close called while another is under way
// returns only once the first has finished (its goroutines waited for,
// its hosts closed), not at once with a nil error.
func TestCloseConcurrentWaits(t *testing.T) {
	t.Parallel()
	stopped := make(chan struct{})
	s := &Server{stop: func() { close(stopped) }}
	s.work.Add(1) // a supervise goroutine that has not returned yet
	first := make(chan error, 1)
	go func() { first <- s.Close(context.Background()) }() // ends once work is done below
	<-stopped
	second := make(chan error, 1)
	go func() { second <- s.Close(context.Background()) }() // ends with the first
	select {
	case err := <-second:
		t.Fatalf("the second Close returned (%v) while the first still waited for its goroutines", err)
	case <-time.After(100 * time.Millisecond):
	}
	s.work.Done()
	assert.NoError(t, <-first)
	assert.NoError(t, <-second)
}
