package datasets

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
)

// maxDecodeTokens bounds the JSON tokens (brackets, keys, values) that
// records decoded into Go maps and slices may hold at once, across a
// reader's workers, and so the tokens of one record: decoded, a token
// takes up to about 160 bytes (a map of one key is some 360), so a line
// of 16 MiB of tiny objects would decode to 700 MB, on every worker.
const maxDecodeTokens = 1 << 20

// jsonTokens counts b's opening brackets, colons, commas and backslashes,
// inside strings too: an upper bound on the values and keys b decodes
// to, the JSON text its strings may hold included (decodeJSONText decodes
// such a string, its structure maybe escaped, even as \u002c).
func jsonTokens(b []byte) int {
	n := 0
	for _, c := range []byte(tokenBytes) {
		n += bytes.Count(b, []byte{c})
	}
	return n
}

// jsonTokensIn is jsonTokens of a string (a CSV field), without copying it.
func jsonTokensIn(s string) int {
	n := 0
	for _, c := range tokenBytes {
		n += strings.Count(s, string(c))
	}
	return n
}

// tokenBytes are the bytes jsonTokens counts.
const tokenBytes = "{[:,\\"

// errTooManyTokens rejects a record of more than maxDecodeTokens.
var errTooManyTokens = &rowError{reason: fmt.Sprintf("more than %d JSON tokens (brackets, keys, values, escapes, those of its strings included): too many to decode; split or trim the record", maxDecodeTokens)}

// decodeBudget is the tokens the records being decoded may hold at once
// (maxDecodeTokens); a worker waits for its record's share.
type decodeBudget struct {
	mu   sync.Mutex
	cond *sync.Cond
	used int
}

func newDecodeBudget() *decodeBudget {
	b := &decodeBudget{}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// take waits until n more tokens fit and takes them, or fails a record
// of more than the whole budget. Every taker releases in bounded time
// (its decode), so the wait ends.
func (b *decodeBudget) take(n int) (release func(), err error) {
	if n > maxDecodeTokens {
		return nil, errTooManyTokens
	}
	b.mu.Lock()
	for b.used+n > maxDecodeTokens {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.used -= n
		b.mu.Unlock()
		b.cond.Broadcast()
	}, nil
}
