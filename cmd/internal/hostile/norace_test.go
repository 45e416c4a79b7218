//go:build !race

package hostile_test

// raceFactor scales a memory bound for the race detector: 1 without it.
const raceFactor = 1
