//go:build !race

package host

// raceEnabled: the tests run under the race detector (race_test.go).
const raceEnabled = false
