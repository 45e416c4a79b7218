// Package childstate names the states of a host's pool slot, as
// host.ChildInfo.State reports them, for the host and for what reports
// them again (hostmetrics' skulk_child_state labels): one list, so the
// two cannot drift apart.
package childstate

// Names returns the state names in the order of the host's states:
// starting, ready, draining, dead, down (see host.ChildInfo.State for
// what each means). It returns a copy.
func Names() [5]string {
	return [5]string{"starting", "ready", "draining", "dead", "down"}
}
