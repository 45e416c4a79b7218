package cli

import (
	"context"
	"errors"
)

// runChildMode serves the demo tools as a provider child.
func runChildMode(ctx context.Context, args []string, env Env) error {
	return errors.New("child mode not wired yet")
}
