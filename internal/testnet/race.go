//go:build race

package testnet

// Race says this binary was built with -race (the Go toolchain's race
// build tag).
const Race = true
