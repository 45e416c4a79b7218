// Package clitest runs Skulk's commands in tests as a user would and checks
// what a script sees: it builds a command once per test binary, runs it
// with a deadline, and decodes and checks the lines of skulk-host call
// --json against docs/cli.md, "The `--json` line contract", and what the
// demo tools (child/demotools, and the Python SDK's copy of them) must
// answer.
//
// The tests of cmd/skulk-host run it against cmd/skulk-child; those of
// cmd/internal/pyprovider run it against the Python provider. Both use the same
// checks, so the two providers are held to one contract:
//
//	var builds clitest.Builds // removed by TestMain: builds.Remove()
//
//	func TestCount(t *testing.T) {
//		host := builds.Command(t, "github.com/skulkrt/skulk/cmd/skulk-host")
//		r := clitest.Run(t, host, "", "call", "count", "--args", `{"n": 3}`, "--json", "--", provider)
//		clitest.CheckCount(t, clitest.ParseLines(t, r.Stdout), 3)
//	}
package clitest
