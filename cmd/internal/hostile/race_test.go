//go:build race

package hostile_test

// raceFactor scales a memory bound for the race detector, whose shadow
// memory is a multiple of the memory the program touches.
const raceFactor = 3
