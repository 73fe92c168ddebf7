//go:build unix

package h1

import (
	"syscall"

	"golang.org/x/sys/unix"
)

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
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	live := false
	var buf [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		live = err == unix.EAGAIN || err == unix.EWOULDBLOCK // nothing to read: open and quiet
		return true
	}); err != nil {
		return false
	}
	return live
}
