//go:build race

package hostile_test

// raceFactor scales a memory bound for the race detector, whose shadow
// memory grows with the memory the program touches. With 2, the bounds
// are 264 MiB for one call and 465 MiB for two; a race-built host's peak
// grew by 121 MiB and 180 MiB in TestMediaFloodMemoryBounded.
const raceFactor = 2

// floodFrames is the number of 16 MiB frames each call of
// TestMediaFloodMemoryBounded sends. Under the race detector every byte
// read is marked in its shadow memory, which makes a frame cost about six
// times the CPU it costs without: 24 frames (384 MiB a call) are still
// more than the bounds above, and a host process that kept every frame of
// one call grew by 1.1 GiB.
const floodFrames = 24
