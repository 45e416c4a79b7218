package cli

import (
	"testing"
	"time"
)

func TestParseMCP(t *testing.T) {
	o, err := parseMCP([]string{"serve", "--http", "127.0.0.1:0", "--timeout", "2s", "--pool", "2", "--", "./p", "-x"})
	if err != nil {
		t.Fatal(err)
	}
	if o.http != "127.0.0.1:0" || o.timeout != 2*time.Second || o.pool != 2 || len(o.child) != 2 || o.child[1] != "-x" {
		t.Errorf("parsed %+v", o)
	}
	for _, args := range [][]string{
		{"--", "./p"},                   // no subcommand
		{"run", "--", "./p"},            // unknown subcommand
		{"serve", "extra", "--", "./p"}, // stray argument
		{"serve"},                       // no child
		{"serve", "--timeout", "-1s", "--", "./p"},
		{"serve", "--inline-max", "-1", "--", "./p"},
		{"serve", "--pool", "0", "--", "./p"},
	} {
		if _, err := parseMCP(args); statusOf(err) != ExitUsage {
			t.Errorf("parseMCP(%q) = %v, want a usage error", args, err)
		}
	}
}
