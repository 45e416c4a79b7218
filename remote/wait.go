package remote

import "time"

// waitTick is how often Close looks whether the running calls ended.
func waitTick() <-chan time.Time { return time.After(20 * time.Millisecond) }
