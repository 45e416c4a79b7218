//go:build race

package skulktest

// raceEnabled says this test binary was built with -race.
const raceEnabled = true
