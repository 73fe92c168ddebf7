//go:build !unix

package h1

// alive, where a non-blocking peek is not at hand, trusts an idle
// connection unless bytes arrived on it unasked.
func (c *conn) alive() bool { return c.br.Buffered() == 0 }
