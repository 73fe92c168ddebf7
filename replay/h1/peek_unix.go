//go:build unix && !linux && !aix

package h1

import "golang.org/x/sys/unix"

// peek sets quiet when the socket holds nothing to read and is open; it
// never asks to wait. (Linux's peek_linux.go makes the same call without
// the source address unix.Recvfrom allocates.)
func (c *conn) peek(fd uintptr) bool {
	_, _, err := unix.Recvfrom(int(fd), c.peekBuf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	c.quiet = err == unix.EAGAIN || err == unix.EWOULDBLOCK
	return true
}
