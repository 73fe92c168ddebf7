package h1

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// conn is one connection to a host, used by one exchange at a time.
type conn struct {
	nc    net.Conn
	key   string // host:port, its pool
	br    *bufio.Reader
	limit *limitedReader // br's source: bounds a response's head
	// stop detaches the exchange's context; false means the context has
	// already ended and the connection is interrupted.
	stop func() bool
	// The socket and the peek alive makes on it, kept from the first
	// check (alive_unix.go).
	raw     syscall.RawConn
	peekFn  func(fd uintptr) bool
	quiet   bool
	peekBuf [1]byte
	// How the exchange got the connection.
	reused    bool
	idleFor   time.Duration
	idleSince time.Time
}

func newConn(nc net.Conn, key string, bufSize int) *conn {
	l := &limitedReader{nc: nc, left: -1}
	return &conn{nc: nc, key: key, br: bufio.NewReaderSize(l, bufSize), limit: l}
}

// aLongTimeAgo is a deadline in the past: setting it ends the reads and
// writes under way at once.
var aLongTimeAgo = time.Unix(1, 0)

// interrupt ends the connection's current read or write; the exchange's
// error path then closes it.
func (c *conn) interrupt() { c.nc.SetDeadline(aLongTimeAgo) }

// discard closes c after a failed exchange.
func (c *conn) discard() {
	if c.stop != nil {
		c.stop()
	}
	c.nc.Close()
}

// errHeadTooLong is returned for a response whose status line and headers
// run past the transport's MaxResponseHeaderBytes.
var errHeadTooLong = errors.New("h1: the response's headers are too long")

// limitedReader reads from a connection, at most left bytes while left is
// not negative: it bounds what reading a response's head may buffer.
type limitedReader struct {
	nc   net.Conn
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.nc.Read(p)
	}
	if l.left == 0 {
		return 0, fmt.Errorf("%w (over the bound of the read buffer and MaxResponseHeaderBytes)", errHeadTooLong)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.nc.Read(p)
	l.left -= int64(n)
	return n, err
}
