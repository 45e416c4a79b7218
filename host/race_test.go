//go:build race

package host

// raceEnabled: the tests run under the race detector, whose goroutine
// stacks are larger and whose code runs several times slower.
const raceEnabled = true
