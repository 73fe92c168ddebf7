package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// timedReader records the monotonic time of every Read that returns bytes,
// so events parsed from a read carry the time their bytes reached us.
//
// With a delay set it behaves as a slow consumer: it waits that long before
// every read after the first, so unread bytes back up into the socket and
// the server feels the backpressure.
type timedReader struct {
	r     io.Reader
	clock func() int64 // ns since the run's start
	last  int64
	reads int
	delay time.Duration
	ctx   context.Context
}

func (t *timedReader) Read(p []byte) (int, error) {
	if t.delay > 0 && t.reads > 0 {
		sleepCtx(t.ctx, t.delay) // if ctx ends, the read below reports why
	}
	t.reads++
	n, err := t.r.Read(p)
	if n > 0 {
		t.last = t.clock()
	}
	return n, err
}

// maxEventBytes bounds one SSE event; a longer one is a protocol error.
const maxEventBytes = 8 << 20

// errEventTooLong reports an SSE event over maxEventBytes.
var errEventTooLong = fmt.Errorf("SSE event longer than %d MiB", maxEventBytes>>20)

// sseReader parses server-sent events: "data:" lines (joined with newlines
// when several), ":" comments and other fields ignored, CRLF or LF line ends,
// dispatched on a blank line or at end of stream.
type sseReader struct {
	tr   *timedReader
	br   *bufio.Reader
	data []byte
	line []byte
}

func newSSEReader(ctx context.Context, body io.Reader, clock func() int64, readDelay time.Duration) *sseReader {
	tr := &timedReader{r: body, clock: clock, delay: readDelay, ctx: ctx}
	if readDelay > 0 {
		// A slow consumer waits before each read: its reads keep the
		// size they had, so that read_delay_ms sets the same pace.
		return &sseReader{tr: tr, br: bufio.NewReaderSize(tr, slowReadBytes)}
	}
	br := sseBuffers.Get().(*bufio.Reader)
	br.Reset(tr)
	return &sseReader{tr: tr, br: br}
}

// sseBuffers holds the streams' read buffers between requests: a new 16 KiB
// buffer for every response was a tenth of the client's CPU at 2,000
// requests a second, in allocation, zeroing and collection. They are 4 KiB:
// one is held by every open stream, the connection's own buffer below it
// batches the socket's reads, and a longer line is gathered in s.line.
var sseBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, sseReadBytes) }}

// sseReadBytes is a pooled stream buffer's size; slowReadBytes a slow
// consumer's (read_delay_ms), each read of which comes after its delay.
const (
	sseReadBytes  = 4 << 10
	slowReadBytes = 16 << 10
)

// release returns the read buffer for the next stream. Nothing read
// aliases it: lines are copied out (readLine), so the reader must not be
// used after.
func (s *sseReader) release() {
	if s.br.Size() == sseReadBytes {
		s.br.Reset(nil)
		sseBuffers.Put(s.br)
	}
	s.br = nil
}

// next returns the next event's data and the time its last byte arrived.
// A final event that lacks its blank line is still returned; after the last
// event it returns io.EOF, or the transport's error if the stream broke.
func (s *sseReader) next() (data []byte, at int64, err error) {
	s.data = s.data[:0]
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && hasData {
				// A final event without its blank line: dispatch it.
				return s.data, s.tr.last, nil
			}
			return nil, s.tr.last, err
		}
		if len(line) == 0 {
			if hasData {
				return s.data, s.tr.last, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // comment / keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue // event:, id:, retry: do not matter here
		}
		if hasData {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(value) > maxEventBytes {
			return nil, s.tr.last, errEventTooLong
		}
		s.data = append(s.data, value...)
		hasData = true
	}
}

// readLine returns one line without its CR/LF. A line that fits the
// buffer is returned in place, valid until the next read (next copies what
// it keeps); a longer one is gathered in s.line.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		chunk, err := s.br.ReadSlice('\n')
		if err == nil && len(s.line) == 0 {
			return trimEOL(chunk), nil
		}
		if len(s.line)+len(chunk) > maxEventBytes {
			return nil, errEventTooLong
		}
		s.line = append(s.line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(s.line) > 0 {
				return trimEOL(s.line), nil
			}
			return nil, err
		}
		return trimEOL(s.line), nil
	}
}

// trimEOL drops a line's trailing CR and LF bytes.
func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// monotonicClock returns ns since start, from Go's monotonic clock.
func monotonicClock(start time.Time) func() int64 {
	return func() int64 { return int64(time.Since(start)) }
}
