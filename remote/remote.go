package remote

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/skulkrt/skulk/remote/internal/message"

	"github.com/nats-io/nats.go"
)

// What one subscription of a Server or a Client may hold unread in the
// NATS client, in messages and in bytes: room for 256 calls with a full
// 1 MiB window each way, far above what honest peers reach (each call's
// credit bounds its own); a flood past it is dropped by the client, and
// the calls it hit end transport_error at the gap.
const (
	pendingMsgs  = 1 << 20
	pendingBytes = 512 << 20
)

// subscribeLinks subscribes to the messages of a side's calls, the
// subject prefix.* (the last token names the call's link), with the
// pending limits above, and hands each to deliver on the subscription's
// goroutine.
func subscribeLinks(nc *nats.Conn, prefix string, deliver nats.MsgHandler) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(prefix+".*", deliver)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

// Defaults and bounds of Options.
const (
	// DefaultWindow is a call's receive window in each direction: the
	// most stream bytes one side holds that its reader has not read.
	DefaultWindow = 1 << 20
	// MinWindow and MaxWindow bound a configured window.
	MinWindow = 64 << 10
	MaxWindow = 64 << 20
	// DefaultHeartbeatInterval is how often a side that sent nothing else
	// pings the other.
	DefaultHeartbeatInterval = time.Second
	// DefaultHeartbeatTimeout is how long a side waits for any message
	// of a call before it ends the call as unreachable.
	DefaultHeartbeatTimeout = 3 * time.Second
	// DefaultFragment is the most stream bytes a data message carries
	// when the server allows that much.
	DefaultFragment = 256 << 10
)

// ErrName: a service name or host id that is not 1 to 64 letters, digits,
// '-' or '_'.
var ErrName = errors.New("remote: a name must be 1 to 64 letters, digits, '-' or '_'")

// ErrOptions: Options that make no sense (a heartbeat timeout not above
// the interval, a negative value).
var ErrOptions = errors.New("remote: invalid options")

// Options tune the calls of a Client or a Server. The zero Options are the
// defaults.
type Options struct {
	// Window is the receive window of each call in each direction, in
	// bytes: the most of the other side's stream this side holds unread
	// (the credit it gives). 0 means DefaultWindow; other values are
	// clamped to [MinWindow, MaxWindow].
	Window int
	// HeartbeatInterval: a side that sent nothing on a call for this long
	// sends a ping. 0 means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout: a call that got no message at all for this long
	// ends with a synthetic unreachable (the caller) or is cancelled (the
	// serving host). 0 means DefaultHeartbeatTimeout; it must exceed
	// HeartbeatInterval. A dead or partitioned peer is found within
	// HeartbeatTimeout plus half a HeartbeatInterval.
	HeartbeatTimeout time.Duration
}

// Validate refuses negative values and a timeout not above the interval;
// its error matches ErrOptions.
func (o Options) Validate() error {
	if o.Window < 0 || o.HeartbeatInterval < 0 || o.HeartbeatTimeout < 0 {
		return fmt.Errorf("%w: Window, HeartbeatInterval and HeartbeatTimeout must not be negative", ErrOptions)
	}
	e := o.effective()
	if e.HeartbeatTimeout <= e.HeartbeatInterval {
		return fmt.Errorf("%w: HeartbeatTimeout must exceed HeartbeatInterval", ErrOptions)
	}
	return nil
}

func (o Options) effective() Options {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	o.Window = min(max(o.Window, MinWindow), MaxWindow)
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	return o
}

// UnreachableBound is how long after a peer's last message a call ends as
// unreachable at the latest, with these options: HeartbeatTimeout plus
// half a HeartbeatInterval (the heartbeat's clock ticks twice an
// interval).
func (o Options) UnreachableBound() time.Duration {
	e := o.effective()
	return e.HeartbeatTimeout + e.HeartbeatInterval/2
}

// validName reports whether s is a name or host id (ErrName's rule).
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Subjects of a service NAME (docs/protocol.md §10).
func callSubject(name string) string  { return "skulk." + name + ".call" }
func toolsSubject(name string) string { return "skulk." + name + ".tools" }
func hostPrefix(name, id string) string {
	return "skulk." + name + ".h." + id
}

// fragmentFor is the data message size for a connection: DefaultFragment,
// less when the server's max_payload is smaller.
func fragmentFor(nc *nats.Conn) int {
	mp := int(nc.MaxPayload()) - message.HeaderLen
	if mp <= 0 {
		mp = 1
	}
	return min(DefaultFragment, mp)
}

// table holds the links of a Client or a Server by token, and runs their
// heartbeat.
type table struct {
	mu     sync.Mutex
	links  map[string]*link
	closed bool
}

// add puts l in the table and adds one to wg for the goroutine that will
// drop it, unless the table is closed. wg.Add runs under the table's lock,
// so that it happens before the Wait of an owner that closes the table
// (all(true)) and then waits: never an Add concurrent with that Wait.
func (t *table) add(l *link, wg *sync.WaitGroup) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	wg.Add(1)
	if t.links == nil {
		t.links = make(map[string]*link)
	}
	t.links[l.token] = l
	return true
}

// count is how many links the table holds.
func (t *table) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.links)
}

func (t *table) drop(l *link) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.links[l.token] == l {
		delete(t.links, l.token)
	}
}

func (t *table) get(token string) *link {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.links[token]
}

// all returns the links; with close set, no link can be added afterwards.
func (t *table) all(close bool) []*link {
	t.mu.Lock()
	defer t.mu.Unlock()
	if close {
		t.closed = true
	}
	ls := make([]*link, 0, len(t.links))
	for _, l := range t.links {
		ls = append(ls, l)
	}
	return ls
}

func (t *table) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.links)
}

// beat runs the heartbeat of every link until stop is closed: twice an
// interval it pings the links that sent nothing for an interval and ends
// those that heard nothing for the timeout.
func (t *table) beat(stop <-chan struct{}, o Options) {
	tk := time.NewTicker(o.HeartbeatInterval / 2)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tk.C:
			for _, l := range t.all(false) {
				l.tick(now.UnixNano(), o.HeartbeatInterval, o.HeartbeatTimeout)
			}
		}
	}
}

// lastToken returns the part of subj after its last dot.
func lastToken(subj string) string {
	for i := len(subj) - 1; i >= 0; i-- {
		if subj[i] == '.' {
			return subj[i+1:]
		}
	}
	return subj
}
