package remote

// Buffered returns the bytes of the serving host's stream c holds unread.
func Buffered(c *Call) uint64 { return c.l.buffered() }

// Subjects returns the subject c's messages come in on (its reply
// subject) and the one it sends them to (the serving host's; "" before
// the accept).
func Subjects(c *Call) (in, out string) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.c.inbox + "." + c.l.token, c.l.out
}
