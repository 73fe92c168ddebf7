package h1

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// body is a response body read from its connection. Read to its end, it
// gives the connection back to the pool; closed before that, it closes
// the connection rather than read the rest of a stream that may go on
// for minutes.
type body struct {
	inner     io.ReadCloser // net/http's framing of the connection's bytes
	conn      *conn
	transport *Transport
	reuse     bool
	ctx       context.Context

	once   sync.Once   // the connection is let go once: released or closed
	closed atomic.Bool // Close was called: reads fail, as net/http's do
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.inner.Read(p)
	switch {
	case err == io.EOF:
		b.once.Do(func() { b.transport.release(b.conn, b.reuse) })
	case err != nil:
		b.once.Do(b.conn.discard)
		if b.ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			// The deadline set to interrupt the read is not the cause.
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

// Close closes the connection first if the body was not read to its end,
// which also ends a Read under way on another goroutine. It returns nil,
// as net/http's bodies do: the rest of the body is given up, not lost.
func (b *body) Close() error {
	b.closed.Store(true)
	b.once.Do(b.conn.discard)
	return nil
}
