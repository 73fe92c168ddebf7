package replay

import (
	"encoding/hex"
	"hash"

	"github.com/servetrace/servetrace/replay/chunk"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// outputDomain keys output fingerprints apart from every other salted
// hash, so an output never matches an id or a prefix block.
const outputDomain = "servetrace output v1"

// maxHashedChoices bounds the choices fingerprinted in one answer: a
// server naming choice indices past n must not grow the client's state.
const maxHashedChoices = trace.MaxOutputHashes

// outputHashes fingerprints each choice's output text with the run's
// salt as it streams by: the text itself is never kept, and two runs
// with the same salt compare answer for answer.
type outputHashes struct {
	salt anon.Salt
	n    int         // the choices the request asked for
	h    []hash.Hash // by choice index; nil until text comes
}

func newOutputHashes(salt anon.Salt, n int32) *outputHashes {
	return &outputHashes{salt: salt, n: min(max(int(n), 1), maxHashedChoices)}
}

// add hashes an event's text into the choices its pieces name; a piece
// for a choice past n is not hashed.
func (o *outputHashes) add(ev *chunk.Event) {
	start := 0
	for _, p := range ev.Pieces {
		o.write(p.Index, ev.Text[start:p.End])
		start = p.End
	}
}

func (o *outputHashes) write(index int32, text []byte) {
	if index < 0 || int(index) >= o.n {
		return
	}
	if o.h == nil {
		o.h = make([]hash.Hash, o.n)
	}
	if o.h[index] == nil {
		o.h[index] = o.salt.MAC(outputDomain)
	}
	o.h[index].Write(text)
}

// sums returns each choice's fingerprint, 32 hex digits, in index order:
// a choice without text gets the fingerprint of the empty text.
func (o *outputHashes) sums() []string {
	out := make([]string, o.n)
	for i := range out {
		h := o.salt.MAC(outputDomain)
		if o.h != nil && o.h[i] != nil {
			h = o.h[i]
		}
		out[i] = hex.EncodeToString(h.Sum(nil)[:16])
	}
	return out
}
