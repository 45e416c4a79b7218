package skulktest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/host"
)

// Outcome is everything a caller received of one call.
type Outcome struct {
	// Frames are the provider frames in order: the started, the chunks,
	// the terminal last.
	Frames []frame.Frame
	// Result is the completed terminal's payload; nil otherwise.
	Result frame.Payload
	// Err is what Call.Wait returns: nil for a completed call, a
	// *frame.Error for a failed or cancelled one, or another error.
	Err error
}

// ChunkPayloads returns the payloads of the chunks, in order.
func (o *Outcome) ChunkPayloads() []frame.Payload {
	var out []frame.Payload
	for _, f := range o.Frames {
		if f.Kind == frame.KindChunk {
			out = append(out, f.Payload)
		}
	}
	return out
}

// CallError returns Err as a *frame.Error, or nil when it is not one.
func (o *Outcome) CallError() *frame.Error {
	var ce *frame.Error
	if errors.As(o.Err, &ce) {
		return ce
	}
	return nil
}

// Collect reads c to its end and returns what came, failing the test if
// the end does not come within Timeout (the call is left running; the
// host's clean-up ends it).
func Collect(t testing.TB, c *host.Call) *Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	o := &Outcome{}
	for {
		f, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			t.Fatalf("skulktest: call %s (%s) did not end within %v (%d frames so far)", c.ID(), c.Tool(), Timeout, len(o.Frames))
		}
		if err != nil {
			o.Err = err
			return o
		}
		o.Frames = append(o.Frames, f)
	}
	o.Result, o.Err = c.Wait()
	return o
}

// JSONEqual reports whether payload is, as a JSON value, the same as want
// (a JSON text: key order and spacing do not matter, numbers compare by
// value). If not, it fails the test with both.
func JSONEqual(t testing.TB, payload frame.Payload, want string) bool {
	t.Helper()
	var gv, wv any
	got, err := json.Marshal(payload)
	if err == nil {
		err = json.Unmarshal(got, &gv)
	}
	if err != nil {
		t.Errorf("skulktest: JSONEqual: the payload is not JSON: %v", err)
		return false
	}
	if err := json.Unmarshal([]byte(want), &wv); err != nil {
		t.Errorf("skulktest: JSONEqual: want is not JSON: %v", err)
		return false
	}
	if !reflect.DeepEqual(gv, wv) {
		t.Errorf("payload %s, want %s", got, want)
		return false
	}
	return true
}

// WaitRestart waits until slot slot of h has been restarted at least n
// times in all and its child is ready again, and returns what
// Children reports of it then; it fails the test after Timeout.
func WaitRestart(t testing.TB, h *host.Host, slot, n int) host.ChildInfo {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		kids := h.Children()
		if slot >= len(kids) {
			t.Fatalf("skulktest: WaitRestart: the pool has %d slots", len(kids))
		}
		info := kids[slot]
		if info.Restarts >= n && info.State == "ready" {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("skulktest: slot %d not ready after %d restarts within %v: %d restarts, %s, last cause %v",
				slot, n, Timeout, info.Restarts, info.State, info.LastCause)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
