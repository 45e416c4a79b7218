package calllog

// FormatError lets the package's tests check the field an event's JSON form
// broke.
type FormatError = formatError
