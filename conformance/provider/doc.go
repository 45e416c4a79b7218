// Package provider is a black-box conformance suite for Skulk provider
// processes, written from the wire contract alone (docs/protocol.md),
// without reading the code it tests.
//
// Its tests, run by this package's go test or by Run from any module's,
// start the provider binary as a host does (fd 3
// a socketpair for the control connection, fd 4 a listening Unix socket in
// a fresh 0700 directory, the SKULK_* environment), speak raw packets to it
// and check what it answers. The suite imports nothing of Skulk's own, so a
// bug shared by the Go host, child and codec cannot hide itself here; it
// is its own module for the same reason. See README.md for how to run it
// and how its tests map to the contract, and docs/testing.md for Run.
package provider
