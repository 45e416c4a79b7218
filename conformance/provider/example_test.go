package provider_test

import (
	"testing"

	"github.com/skulkrt/skulk/conformance/provider"
)

// A provider author runs the suite from a test of their own module (which
// requires github.com/skulkrt/skulk/conformance): build the provider, then
// Run it with a tool for the tests that need one. Tests that drive demo
// tools the provider does not offer are skipped.
//
// This example is compiled but not run: Run needs the *testing.T of a test
// and a provider binary, which an Example has neither of. The same code
// runs in examples/wordcount's TestConformance (built with
// skulktest.Build), which CI runs, and this package's own TestXxx run
// every test against cmd/skulk-child.
func ExampleRun() {
	// In your_provider_test.go:
	testConformance := func(t *testing.T) {
		provider.Run(t, "/path/to/your-provider", provider.Options{Tool: "your_tool"})
	}
	_ = testConformance
}
