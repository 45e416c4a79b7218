// Package pyprovider holds no code: its test drives the Python provider
// (python/skulk-py-child, the Python SDK's demo tools) through the real
// host, so that a host change that breaks a provider not written in Go
// fails the build; its CLI tests run the built cmd/skulk-host on it as a
// user would. The test needs /usr/bin/python3 (or python3 on PATH)
// with Debian's python3-msgpack; without them it skips, unless
// SKULK_REQUIRE_PYTHON=1 (set by .ci/run), when it fails.
package pyprovider
