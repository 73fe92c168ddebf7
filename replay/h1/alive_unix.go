//go:build unix && !aix

package h1

import "syscall"

// alive reports whether an idle connection may still be used: the server
// has neither closed it (a read would see end of file) nor sent anything
// unasked. net/http's transport learns this from the read its goroutine
// keeps posted on every idle connection; without that goroutine, one
// non-blocking peek at reuse tells the same, so a server's keep-alive
// timeout costs no request.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.raw == nil {
		sc, ok := c.nc.(syscall.Conn)
		if !ok {
			return true
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		c.raw, c.peekFn = raw, c.peek
	}
	c.quiet = false
	if c.raw.Read(c.peekFn) != nil {
		return false
	}
	return c.quiet
}
