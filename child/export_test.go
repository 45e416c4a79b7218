package child

// Names the package's own tests reach through package child_test: the
// exact cause behind ErrStartup and ErrTooDeep, which callers match by the
// sentinel alone.
var (
	ErrNoStartup  = errNoStartup
	ErrVersion    = errVersion
	ErrBadStartup = errBadStartup
)

// DepthError is the ErrTooDeep refusal with its numbers.
type DepthError = depthError
