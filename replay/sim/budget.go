package sim

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Bounds on request bodies. One body is at most maxRequestBytes (a chat
// request with a few large images inline). The bodies held between their
// arrival and the request's submission to the engine (read, decoded,
// tokenized), and the images they make the simulator fetch, share
// maxBodyBytesInFlight: past it a request is answered busy (429 with a
// Retry-After) instead of being read, as an overloaded server sheds load,
// so that many clients sending large bodies at once cannot exhaust memory.
// Decoding holds a few times a body's bytes while it lasts.
const (
	maxRequestBytes      = 64 << 20
	maxBodyBytesInFlight = 128 << 20
	bodyStep             = 1 << 20 // taken at a time from the budget for a body of unknown length
	maxTokenizeRequests  = 32      // /tokenize requests served at once
)

var (
	errBusy         = errors.New("busy")
	errBodyTooLarge = fmt.Errorf("request body over %d MiB", maxRequestBytes>>20)
)

// byteBudget is a number of bytes shared by requests in progress.
type byteBudget struct {
	mu          sync.Mutex
	used, limit int64
}

func newByteBudget(limit int64) *byteBudget { return &byteBudget{limit: limit} }

// hold is one request's share of a budget, given back by release.
type hold struct {
	b *byteBudget
	n int64
}

func (b *byteBudget) hold() *hold { return &hold{b: b} }

// inUse is the bytes held now.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// grow takes n more bytes for h, or reports false, taking none, when the
// budget has not that many left.
func (h *hold) grow(n int64) bool {
	b := h.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.limit-b.used {
		return false
	}
	b.used += n
	h.n += n
	return true
}

// shrink gives back n of the bytes h holds.
func (h *hold) shrink(n int64) {
	b := h.b
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	h.n -= n
}

// release gives back everything h holds.
func (h *hold) release() {
	b := h.b
	b.mu.Lock()
	b.used -= h.n
	b.mu.Unlock()
	h.n = 0
}

// readBody reads a request's body within maxRequestBytes, holding its
// bytes in h first: a body of known length at once, before any is read,
// one of unknown length a step at a time. It fails with errBusy where the
// budget is spent and errBodyTooLarge past the bound.
func readBody(r *http.Request, h *hold) ([]byte, error) {
	if r.ContentLength > maxRequestBytes {
		return nil, errBodyTooLarge
	}
	if r.ContentLength >= 0 {
		if !h.grow(r.ContentLength) {
			return nil, errBusy
		}
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			if len(buf) > maxRequestBytes {
				return nil, errBodyTooLarge
			}
			step := min(max(cap(buf), bodyStep), maxRequestBytes+1-cap(buf))
			if !h.grow(int64(step)) {
				return nil, errBusy
			}
			grown := make([]byte, len(buf), cap(buf)+step)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF && len(buf) > maxRequestBytes:
			return nil, errBodyTooLarge
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// heldReader reads r, holding in h each byte it returns; past the budget
// it fails with errBusy.
type heldReader struct {
	r io.Reader
	h *hold
}

func (hr heldReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	if n > 0 && !hr.h.grow(int64(n)) {
		return 0, errBusy
	}
	return n, err
}

// answerBodyError answers a body that could not be read: busy, too large,
// or cut off (a client that stopped sending within the read timeout).
func answerBodyError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errBusy):
		busy(w, fmt.Sprintf("the server is reading %d MiB of request bodies, as many as it holds at once; retry later", maxBodyBytesInFlight>>20))
	case errors.Is(err, errBodyTooLarge):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", err.Error())
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "read request body: "+err.Error())
	}
}

// answerBusyOrBad answers an image or clip that could not be resolved:
// busy where its fetch ran past the body budget, else a bad request.
func answerBusyOrBad(w http.ResponseWriter, err error) {
	if errors.Is(err, errBusy) {
		busy(w, fmt.Sprintf("the server is holding %d MiB of request bodies and fetched images, as many as it holds at once; retry later", maxBodyBytesInFlight>>20))
		return
	}
	badRequest(w, err.Error())
}
