package provider_test

import (
	"testing"

	"github.com/skulkrt/skulk/conformance/provider"
)

// A provider author runs the suite from a test of their own module (which
// requires github.com/skulkrt/skulk/conformance): build the provider, then
// Run. Tests that drive demo tools the provider does not offer are skipped.
// The examples module (examples/wordcount) does this with skulktest.Build.
func ExampleRun() {
	_ = func(t *testing.T) {
		provider.Run(t, "/path/to/your-provider", provider.Options{})
	}
}
