//go:build race

package hostile_test

// raceFactor scales a memory bound for the race detector, whose shadow
// memory grows with the memory the program touches. With 2, the bounds
// are 260 MiB for one call and 457 MiB for two; a race-built host's peak
// grew by 121 MiB and 180 MiB in TestMediaFloodMemoryBounded.
const raceFactor = 2

// floodFrames is the number of 16 MiB frames each call of
// TestMediaFloodMemoryBounded sends: 384 MiB a call. Under the race
// detector every byte read is marked in its shadow memory, which makes a
// frame cost about five times the CPU it costs without. A host process
// that kept 3 frames of each call grew by 387 MiB (one call) and 811 MiB
// (two), and fails the test.
const floodFrames = 24
