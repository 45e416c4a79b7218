//go:build !race

package hostile_test

// raceFactor scales a memory bound for the race detector: 1 without it.
const raceFactor = 1

// floodFrames is the number of 16 MiB frames each call of
// TestMediaFloodMemoryBounded sends: 768 MiB a call, almost six times the
// bound for one call (132 MiB).
const floodFrames = 48
