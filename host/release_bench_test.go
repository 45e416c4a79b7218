package host

import "github.com/skulkrt/skulk/frame"

// releaseFrame hands an inline frame's data back to its call.
func releaseFrame(c *Call, f frame.Frame) { c.Release(f) }
