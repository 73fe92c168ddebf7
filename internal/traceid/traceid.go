// Package traceid derives the W3C trace context replay sends with each
// request, so that the spans a server exports about it can be told apart
// from other traffic's and joined to the request without a table.
package traceid

import (
	"crypto/sha256"
	"encoding/hex"
)

// ID is a W3C trace id: 16 bytes, never all zero.
type ID [16]byte

// String is the id as traceparent and OTLP/JSON write it: 32 lowercase
// hex digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Run returns the first half every trace id of a run shares: the first 8
// bytes of SHA-256("servetrace run\x00" + runID). A collector keeps the
// spans whose trace id starts with it and counts the rest as not the
// run's.
func Run(runID string) [8]byte {
	sum := sha256.Sum256([]byte("servetrace run\x00" + runID))
	return [8]byte(sum[:8])
}

// For returns the trace id of request requestID (the workload row's id)
// of run runID: Run(runID), then the first 8 bytes of
// SHA-256("servetrace request\x00" + requestID). analyze recomputes it
// from a result row to find the row's spans.
func For(runID, requestID string) ID {
	var id ID
	run := Run(runID)
	copy(id[:8], run[:])
	sum := sha256.Sum256([]byte("servetrace request\x00" + requestID))
	copy(id[8:], sum[:8])
	if id == (ID{}) {
		id[15] = 1 // all zero is invalid in W3C trace context
	}
	return id
}

// Traceparent returns the traceparent header of a request: version 00,
// its trace id, a parent span id (the next 8 bytes of the request's hash,
// never zero) and the sampled flag, so that a server records its span.
func Traceparent(runID, requestID string) string {
	id := For(runID, requestID)
	sum := sha256.Sum256([]byte("servetrace request\x00" + requestID))
	span := [8]byte(sum[8:16])
	if span == ([8]byte{}) {
		span[7] = 1
	}
	return "00-" + id.String() + "-" + hex.EncodeToString(span[:]) + "-01"
}

// Parse reads a trace id written as 32 hex digits (either case); ok is
// false for anything else, including the invalid all-zero id.
func Parse(s string) (id ID, ok bool) {
	if len(s) != 32 {
		return ID{}, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil || id == (ID{}) {
		return ID{}, false
	}
	return id, true
}
