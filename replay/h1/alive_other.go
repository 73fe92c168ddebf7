//go:build !unix || aix

package h1

// alive, where a non-blocking peek is not at hand (AIX has no
// MSG_DONTWAIT), trusts an idle connection unless bytes arrived on it
// unasked.
func (c *conn) alive() bool { return c.br.Buffered() == 0 }
