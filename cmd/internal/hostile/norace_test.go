//go:build !race

package hostile_test

// raceFactor scales a memory bound for the race detector: 1 without it.
const raceFactor = 1

// floodFrames is the number of 16 MiB frames each call of
// TestMediaFloodMemoryBounded sends: 768 MiB a call. A host process that
// kept 3 frames of each call grew by 112 MiB (one call, under the
// 130 MiB bound) and 241 MiB (two, over the 228 MiB bound), and fails
// the test; one that kept 5 fails both.
const floodFrames = 48
