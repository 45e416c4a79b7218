//go:build race

package main

// raceBuild: the test binary runs under the race detector, whose memory
// would be measured with the command's.
const raceBuild = true
