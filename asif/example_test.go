package asif_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/skulkrt/skulk/asif"
)

// Check a document read from a file: each refusal is a *RuleError naming
// its rule, and a document without refusals is valid only when it holds no
// records of a rule family the checker does not check.
func ExampleCheck() {
	f, err := os.Open("testdata/tool-call-partial.session.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	report, err := asif.CheckReader(f, asif.Options{})
	var re *asif.RuleError
	switch {
	case errors.As(err, &re):
		fmt.Println("refused:", re.Rule, re.ObjectID)
	case err != nil:
		fmt.Println("refused:", err) // JSON, version or schema
		return
	}
	for _, s := range report.Streams {
		fmt.Println(s.StreamID, s.Status, s.Size, "executable:", s.Executable)
	}
	for _, c := range report.Branches[0].Calls {
		fmt.Println(c.CallID, c.ArgumentsStatus, "terminal:", c.Terminal)
	}
	fmt.Println("not checked, present:", report.Unchecked)
	fmt.Println("valid:", report.Valid(err))
	// Output:
	// stream-partial partial 24 executable: false
	// call-1 partial terminal: false
	// not checked, present: [contexts configurations executions]
	// valid: false
}
