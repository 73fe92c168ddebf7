package h1

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// defaultUserAgent is what net/http's transport sends when the request
// sets no User-Agent; servers see the same client either way.
const defaultUserAgent = "Go-http-client/1.1"

// firstWrite bounds the body bytes that go out with the head: a long
// prompt's body follows in writes of its own, so the head's write, and
// onHead, come as soon as the server can start to read.
const firstWrite = 64 << 10

// writeRequest writes req's head and body to c. The head goes out with
// the body's first bytes in one write (writev), so a request of a small
// body is one system call, as on net/http's buffered writer; onHead runs
// once that write is done, the head on the socket. It reports whether
// the request asks for the connection to be closed after its response.
// The request's body is closed.
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
		body, length = io.NopCloser(strings.NewReader(string(b))), int64(len(b))
	}
	closeAfter = req.Close || hasToken(req.Header["Connection"], "close")

	h := c.head[:0]
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
	if req.Close && !hasToken(req.Header["Connection"], "close") {
		h = append(h, "Connection: close\r\n"...)
	}
	var names [16]string
	keys := names[:0]
	for k := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // the transport's own
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range req.Header[k] {
			h = append(h, k...)
			h = append(h, ": "...)
			h = append(h, strings.TrimSpace(v)...)
			h = append(h, "\r\n"...)
		}
	}
	h = append(h, "\r\n"...)
	c.head = h

	w := headWriter{nc: c.nc, head: h, onHead: onHead}
	if body != nil {
		n, err := io.Copy(&w, body)
		if err != nil {
			return false, err
		}
		if n != length {
			return false, fmt.Errorf("h1: the request body was %d bytes, not its Content-Length %d", n, length)
		}
	}
	if !w.wrote {
		if _, err := w.Write(nil); err != nil {
			return false, err
		}
	}
	return closeAfter, nil
}

// headWriter writes the request head with the first bytes of the body,
// then runs onHead.
type headWriter struct {
	nc     net.Conn
	head   []byte
	onHead func()
	wrote  bool
}

func (w *headWriter) Write(p []byte) (int, error) {
	if w.wrote {
		return w.nc.Write(p)
	}
	w.wrote = true
	first := p[:min(len(p), firstWrite)]
	bufs := net.Buffers{w.head, first}
	n, err := bufs.WriteTo(w.nc)
	written := max(0, int(n)-len(w.head))
	if err != nil {
		return written, err
	}
	if w.onHead != nil {
		w.onHead()
	}
	if len(first) < len(p) {
		m, err := w.nc.Write(p[len(first):])
		return written + m, err
	}
	return written, nil
}

// hasToken reports whether a comma-separated header's values hold token,
// case-insensitively.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// validHeaders refuses a header that would break the request's framing:
// a name that is not an RFC 9110 token, or a value holding a control
// character other than tab (a CR or LF would start a header of its own).
func validHeaders(h http.Header) error {
	for k, vs := range h {
		if k == "" || strings.IndexFunc(k, func(r rune) bool { return !isTokenRune(r) }) >= 0 {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vs {
			for i := 0; i < len(v); i++ {
				if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
					return fmt.Errorf("h1: invalid header field value for %q", k)
				}
			}
		}
	}
	return nil
}

// isTokenRune reports whether r may stand in an RFC 9110 token.
func isTokenRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return r < 0x80 && strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}
