//go:build linux

package h1

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peek sets quiet when the socket holds nothing to read and is open; it
// never asks to wait.
func (c *conn) peek(fd uintptr) bool {
	// recvfrom without a source address: unix.Recvfrom allocates one.
	_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.peekBuf[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	c.quiet = errno == unix.EAGAIN || errno == unix.EWOULDBLOCK
	return true
}
