package h1

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// defaultUserAgent is what net/http's transport sends when the request
// sets no User-Agent; servers see the same client either way.
const defaultUserAgent = "Go-http-client/1.1"

// firstWrite bounds the body bytes that go out with the head: a long
// prompt's body follows in a write of its own, so the head's write, and
// onHead, come as soon as the server can start to read.
const firstWrite = 64 << 10

// writeBuffers hold a request's head and its body's first bytes while
// they are written; a buffer that grew past keptBuffer is not kept.
var writeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const keptBuffer = firstWrite + 16<<10

// writeRequest writes req's head and body to c. The head goes out with
// at most firstWrite of the body in one write, so a request of a small
// body is one system call, as on net/http's buffered writer; onHead runs
// once that write is done, the head on the socket. (One write of a
// copy, not a writev of the two: the race detector sees a write, not a
// writev, order what the server then reads.) It reports whether the
// request asks for the connection to be closed after its response. The
// request's body is closed.
func (c *conn) writeRequest(req *http.Request, host string, onHead func()) (closeAfter bool, err error) {
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	defer func() {
		if body != nil {
			body.Close()
		}
	}()
	length := req.ContentLength
	if body != nil && length <= 0 {
		// An unknown length: read the body to know it, rather than
		// chunking a request body, which some servers refuse.
		b, err := io.ReadAll(body)
		if err != nil {
			return false, fmt.Errorf("h1: reading the request body: %w", err)
		}
		body.Close()
		body, length = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	closeAfter = req.Close || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")

	buf := writeBuffers.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= keptBuffer {
			writeBuffers.Put(buf)
		}
	}()
	h := (*buf)[:0]
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	h = append(h, method...)
	h = append(h, ' ')
	h = append(h, req.URL.RequestURI()...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(h, host...)
	h = append(h, "\r\n"...)
	if _, ok := req.Header["User-Agent"]; !ok {
		h = append(h, "User-Agent: "+defaultUserAgent+"\r\n"...)
	}
	if body != nil || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		h = append(h, "Content-Length: "...)
		h = strconv.AppendInt(h, max(length, 0), 10)
		h = append(h, "\r\n"...)
	}
	if req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		h = append(h, "Connection: close\r\n"...)
	}
	var names [16]string
	keys := names[:0]
	for k := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // the transport's own
		case "User-Agent":
			if len(req.Header[k]) == 0 || req.Header[k][0] == "" {
				continue // set empty to send none, as net/http reads it
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		values := req.Header[k]
		if k == "User-Agent" {
			values = values[:1] // net/http sends the first only
		}
		for _, v := range values {
			h = append(h, k...)
			h = append(h, ": "...)
			h = append(h, strings.TrimSpace(v)...)
			h = append(h, "\r\n"...)
		}
	}
	h = append(h, "\r\n"...)
	first := int(min(length, firstWrite))
	if body == nil {
		first = 0
	}
	h = slices.Grow(h, first)
	*buf = h
	if first > 0 {
		if _, err := io.ReadFull(body, h[len(h):len(h)+first]); err != nil {
			return false, fmt.Errorf("h1: the request body ended short of its Content-Length %d: %w", length, err)
		}
	}
	if _, err := c.nc.Write(h[:len(h)+first]); err != nil {
		return false, err
	}
	if onHead != nil {
		onHead()
	}
	if body != nil {
		if rest := length - int64(first); rest > 0 {
			err = writeRest(c.nc, body, rest)
		} else {
			err = nothingBeyond(body) // it went out with the head: no more
		}
	}
	return closeAfter, err
}

// writeRest writes the body's next rest bytes to w and never more: bytes
// past the Content-Length would reach the server as the start of another
// request. A body that is a WriterTo (bytes.Reader's, through
// http.NewRequest's NopCloser) writes them in one call, through a writer
// that takes no more than rest; any other body is read through a limit
// and then checked for more.
func writeRest(w io.Writer, body io.Reader, rest int64) error {
	lw := &limitedWriter{w: w, left: rest}
	var n int64
	var err error
	if wt, ok := body.(io.WriterTo); ok {
		n, err = wt.WriteTo(lw)
	} else {
		n, err = io.Copy(lw, io.LimitReader(body, rest))
		if err == nil && n == rest {
			if err := nothingBeyond(body); err != nil {
				return err
			}
		}
	}
	switch {
	case lw.over:
		return errBodyTooLong
	case lw.err != nil:
		// The connection refused the write: the server may have
		// answered already.
		return &bodyWriteError{lw.err}
	case err != nil:
		// Reading the caller's body failed: its error, at once.
		return fmt.Errorf("h1: reading the request body: %w", err)
	case n != rest:
		return fmt.Errorf("h1: the request body ended %d bytes short of its Content-Length", rest-n)
	}
	return nil
}

// errBodyTooLong is returned for a body with bytes past its
// Content-Length. They were not sent, and the caller should hear of a
// request sent short of its body, as net/http's transport reports it.
var errBodyTooLong = errors.New("h1: the request body is longer than its Content-Length")

// nothingBeyond reads one byte more from a body whose Content-Length was
// sent, and fails if it finds one.
func nothingBeyond(body io.Reader) error {
	var one [1]byte
	n, err := io.ReadFull(body, one[:])
	if n > 0 {
		return errBodyTooLong
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("h1: reading the request body: %w", err)
	}
	return nil
}

// limitedWriter passes at most left bytes on to w. It notes a write that
// would go over, and keeps w's own error apart from the body's.
type limitedWriter struct {
	w    io.Writer
	left int64
	over bool
	err  error // w's error
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	over := int64(len(p)) > l.left
	if over {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	if err != nil {
		l.err = err
		return n, err
	}
	if over {
		l.over = true
		return n, errBodyTooLong
	}
	return n, nil
}

// bodyWriteError is a failure to write a request's body after its head
// went out: the server may have answered already (413, say) and stopped
// reading, so the exchange looks for that answer before giving up.
type bodyWriteError struct{ err error }

func (e *bodyWriteError) Error() string { return e.err.Error() }
func (e *bodyWriteError) Unwrap() error { return e.err }

// validRequest refuses a request whose head would not say what the
// caller meant: a method that is not a token, a Host or target holding a
// space or control character (a CR or LF would start a header of its
// own), a header validHeaders refuses, or a Content-Length its body
// cannot hold to.
func validRequest(req *http.Request) error {
	if m := req.Method; m != "" && !httpguts.ValidHeaderFieldName(m) { // a token, as a field name is
		return fmt.Errorf("h1: invalid method %q", m)
	}
	if h := hostHeader(req); !printable(h) {
		return fmt.Errorf("h1: invalid Host %q", h)
	}
	if u := req.URL.RequestURI(); !printable(u) {
		return fmt.Errorf("h1: invalid request target %q", u)
	}
	noBody := req.Body == nil || req.Body == http.NoBody
	if noBody && req.ContentLength > 0 {
		return fmt.Errorf("h1: Request.ContentLength=%d with no body", req.ContentLength)
	}
	return validHeaders(req.Header)
}

// printable reports whether s holds only visible ASCII and UTF-8 bytes:
// no space, no control character.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// validHeaders refuses a header that would break the request's framing:
// a name that is not an RFC 9110 token, or a value holding a control
// character other than tab (a CR or LF would start a header of its own).
// The rules are net/http's own, from httpguts.
func validHeaders(h http.Header) error {
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
		}
	}
	return nil
}
