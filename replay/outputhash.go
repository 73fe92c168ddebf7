package replay

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/servetrace/servetrace/internal/hashmix"
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
// with the same salt compare answer for answer. The text is gathered in
// a pooled buffer after the HMAC's inner pad, so a streamed answer costs
// no allocation per event; past answerChunk bytes the buffer is fed to a
// running hash and emptied, so an answer of any length holds at most
// answerChunk bytes per choice.
type outputHashes struct {
	keyed   *anon.Keyed
	n       int         // the choices the request asked for
	bufs    []*[]byte   // by choice index; nil until text comes
	digests []hash.Hash // by choice index; nil until its text passes answerChunk
	// events, when set, also chains the text of each streamed event into
	// a hash kept after every event (a greedy request of one choice), so
	// two runs' answers can be told where they first part.
	events    bool
	eventKey  uint64
	chain     uint64
	eventSums []int32
}

func newOutputHashes(keyed *anon.Keyed, n int32) *outputHashes {
	return &outputHashes{keyed: keyed, n: min(max(int(n), 1), maxHashedChoices)}
}

// answerBuffers holds the buffers answers are gathered in between
// requests; one grown past maxPooledAnswer is left to the collector.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// answerChunk is the most text a choice's buffer gathers before it is
// hashed: an answer up to it costs one SHA-256 and no allocation, a
// longer one a running hash.
const (
	answerChunk     = 16 << 10
	maxPooledAnswer = 4 * answerChunk
)

// withEvents turns on the per-event chain, keyed by key (eventKey).
func (o *outputHashes) withEvents(key uint64) *outputHashes {
	o.events, o.eventKey, o.chain = o.n == 1, key, key
	return o
}

// eventKey derives the per-event chain's key from the salt: a keyed
// 64-bit value, so the short chained hashes say nothing of the text to
// whoever lacks the salt.
func eventKey(salt anon.Salt) uint64 {
	k := salt.Keyed(outputEventDomain)
	sum := k.Sum(k.Start(nil))
	return binary.LittleEndian.Uint64(sum[:8])
}

// outputEventDomain keys the per-event chain apart from the answers'
// fingerprints.
const outputEventDomain = "servetrace output events v1"

// chainEvent folds one streamed event's text into the chain and keeps
// the chain's top 32 bits.
func (o *outputHashes) chainEvent(text []byte) {
	if len(o.eventSums) >= maxEventHashes {
		return
	}
	h := fnv.New64a()
	h.Write(text)
	o.chain = hashmix.Finalize(o.chain ^ hashmix.Finalize(h.Sum64()^o.eventKey))
	o.eventSums = append(o.eventSums, int32(o.chain>>32))
}

// maxEventHashes bounds the chained hashes kept for one answer, a list of
// its result row.
const maxEventHashes = maxRowList

// add hashes an event's text into the choices its pieces name; a piece
// for a choice past n is not hashed.
func (o *outputHashes) add(ev *chunk.Event) {
	start := 0
	for _, p := range ev.Pieces {
		o.write(p.Index, ev.Text[start:p.End])
		start = p.End
	}
	if o.events && len(ev.Pieces) > 0 {
		o.chainEvent(ev.Text)
	}
}

func (o *outputHashes) write(index int32, text []byte) {
	if index < 0 || int(index) >= o.n {
		return
	}
	if o.bufs == nil {
		o.bufs = make([]*[]byte, o.n)
	}
	b := o.bufs[index]
	if b == nil {
		b = answerBuffers.Get().(*[]byte)
		*b = o.keyed.Start(*b)
		o.bufs[index] = b
	}
	if len(*b)+len(text) > answerChunk {
		d := o.digest(index)
		d.Write(*b)
		*b = (*b)[:0]
		if len(text) >= answerChunk {
			d.Write(text)
			return
		}
	}
	*b = append(*b, text...)
}

// digest is the running hash of choice index, made at its first use.
func (o *outputHashes) digest(index int32) hash.Hash {
	if o.digests == nil {
		o.digests = make([]hash.Hash, o.n)
	}
	if o.digests[index] == nil {
		o.digests[index] = sha256.New()
	}
	return o.digests[index]
}

// sums returns each choice's fingerprint, 32 hex digits, in index order
// (a choice without text gets the fingerprint of the empty text), and
// gives the buffers back.
func (o *outputHashes) sums() []string {
	out := make([]string, o.n)
	var empty []byte
	for i := range out {
		var sum [32]byte
		switch {
		case o.digests != nil && o.digests[i] != nil:
			d := o.digests[i]
			d.Write(*o.bufs[i])
			var inner [sha256.Size]byte
			sum = o.keyed.SumInner([sha256.Size]byte(d.Sum(inner[:0])))
		case o.bufs != nil && o.bufs[i] != nil:
			sum = o.keyed.Sum(*o.bufs[i])
		default:
			empty = o.keyed.Start(empty)
			sum = o.keyed.Sum(empty)
		}
		out[i] = hex.EncodeToString(sum[:16])
	}
	o.release()
	return out
}

// release gives the buffers back to the pool; sums calls it, and the
// exchange when the answer was not ok.
func (o *outputHashes) release() {
	for i, b := range o.bufs {
		if b != nil && cap(*b) <= maxPooledAnswer {
			answerBuffers.Put(b)
		}
		o.bufs[i] = nil
	}
	o.digests = nil
}

// greedy reports whether a request's answer should repeat exactly: sent
// with temperature 0 (below vLLM's 1e-5) or with a seed that was not
// stripped.
func greedy(res *trace.Result) bool {
	if t := res.Temperature; t != nil && *t < 1e-5 {
		return true
	}
	return res.Seed != nil && !slices.Contains(res.FeaturesStripped, FeatureSeed)
}
