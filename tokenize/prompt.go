package tokenize

//go:generate go run gen_words.go

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// candidateWords are common English words. A PromptBuilder keeps those whose
// space-prefixed form is exactly one token in its encoding.
const candidateWords = `the of and to in is was for on that with as by at from his her be are it an
which or had not but were have this they their one all been has who more when will would there
its also after new first into other two time can only over years some than such most may these
made them out about where many used between during under before world then since city through
both while well state three later work year part known could people however film found including
area like back being each did name same school season early national number life war end history
day team game high family second series four group against called five during music long own
team around public even although following system home left member based place main became within
general water service around old large several government band played along until way best
university last small following among late great because still company album government light
often another what our now good right house power line free order case week point data field
form stone green river church north south east west land town road king queen early island
music book story word sound open real hand head body close three seven eight nine zero level
model table class track plan value test page rate range price cost market store size color
paper road glass metal wood fire earth wind rain snow cloud star moon ocean lake hill valley
forest garden flower tree leaf root seed fruit bread milk salt sugar coffee tea wine horse bird
fish dog cat cow sheep animal child woman man friend father mother brother sister daughter son`

// Counter counts tokens; a negative count means the count failed.
type Counter interface {
	Count(text string) int
	Name() string
}

// PromptBuilder synthesizes prompt text of an exact token count. Text for a
// prefix block depends only on the block's id, so requests that share block
// ids share byte-identical text through those blocks, and a server's prefix
// cache sees the reuse the trace had.
type PromptBuilder struct {
	tok       Counter
	blockSize int
	words     []string // each " "+word is one token
	spaced    []string // " "+word, for each of words
	plainJSON bool     // no word needs escaping in a JSON string
	// padded holds each spaced word in a fixed array, its length in
	// spacedLen: a build copies a word as one array store where a copy
	// of its few bytes (a runtime call a word) was a third of its time.
	padded    [][wordPad]byte
	spacedLen []uint8
	// salt is mixed into every block's and seed's key (Salted).
	salt uint64
}

// Salted returns a builder whose prompts are other text than b's: every
// block id and seed is keyed with salt, so equal blocks still make equal
// text within the salted builder's prompts, and none of b's. A replay
// salts its prompts so that a server's prefix cache, warmed by an earlier
// run of the same workload, finds none of them; salt 0 is b itself.
func (b *PromptBuilder) Salted(salt uint64) *PromptBuilder {
	c := *b
	c.salt = salt
	return &c
}

// wordPad bounds a spaced word's length for the padded copies.
const wordPad = 16

// NewPromptBuilder returns a builder for tok with prefix blocks of blockSize
// tokens, on the vocabulary words that tok counts as one token: listed for
// the bundled encodings (singleTokenWords), so the builder does not build
// a Lazy tokenizer, else counted by CountSingleTokenWords.
func NewPromptBuilder(tok Counter, blockSize int) (*PromptBuilder, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("tokenize: block size must be positive, got %d", blockSize)
	}
	words, err := listedWords(tok)
	if words == nil && err == nil {
		words, err = CountSingleTokenWords(tok)
	}
	if err != nil {
		return nil, err
	}
	return newPromptBuilder(tok, blockSize, words)
}

// listedWords returns the listed single-token words of a bundled
// encoding's tokenizer, or nil for any other counter.
func listedWords(tok Counter) ([]string, error) {
	t, ok := tok.(*Tokenizer)
	if !ok || !t.bundled {
		return nil, nil
	}
	list, ok := singleTokenWords[t.name]
	if !ok {
		return nil, fmt.Errorf("tokenize: no words listed for %s; run go generate ./tokenize", t.name)
	}
	return strings.Fields(list), nil
}

// CountSingleTokenWords returns the candidate words whose space-prefixed
// form tok counts as one token, in the candidates' order, and checks on a
// sample that words do not merge: 300 words must count as 300 tokens.
func CountSingleTokenWords(tok Counter) ([]string, error) {
	seen := map[string]bool{}
	var words []string
	for _, w := range strings.Fields(candidateWords) {
		if seen[w] {
			continue
		}
		seen[w] = true
		if tok.Count(" "+w) == 1 {
			words = append(words, w)
		}
	}
	b, err := newPromptBuilder(tok, 1, words)
	if err != nil {
		return nil, err
	}
	if n := tok.Count(b.build(300, nil, 1)); n != 300 {
		return nil, fmt.Errorf("tokenize: 300 single-token words count as %d tokens under %s: its pre-tokenizer merges across words; use a tiktoken-style tokenizer", n, tok.Name())
	}
	return words, nil
}

// newPromptBuilder returns a builder on words, each one token under tok.
func newPromptBuilder(tok Counter, blockSize int, words []string) (*PromptBuilder, error) {
	if len(words) < 64 {
		return nil, fmt.Errorf("tokenize: only %d single-token words under %s; cannot synthesize prompts of exact length", len(words), tok.Name())
	}
	if len(words) > 1<<16 { // a build draws its words' indices as uint16
		return nil, fmt.Errorf("tokenize: %d single-token words under %s; a prompt builder takes at most 65,536", len(words), tok.Name())
	}
	b := &PromptBuilder{tok: tok, blockSize: blockSize, words: words, spaced: make([]string, len(words))}
	b.plainJSON = true
	b.padded, b.spacedLen = make([][wordPad]byte, len(words)), make([]uint8, len(words))
	for i, w := range words {
		b.spaced[i] = " " + w
		b.plainJSON = b.plainJSON && JSONPlain(b.spaced[i])
		if len(b.spaced[i]) > wordPad {
			return nil, fmt.Errorf("tokenize: the word %q is longer than %d bytes", w, wordPad-1)
		}
		copy(b.padded[i][:], b.spaced[i])
		b.spacedLen[i] = uint8(len(b.spaced[i]))
	}
	return b, nil
}

// BlockSize returns the prefix block size in tokens.
func (b *PromptBuilder) BlockSize() int { return b.blockSize }

// PlainJSON reports whether every prompt the builder makes stands in a
// JSON string as it is: encoding/json (which also escapes <, > and &)
// would copy it byte for byte, so a caller may copy it into a body without
// encoding/json's scan of each byte, most of a long prompt's body's cost.
func (b *PromptBuilder) PlainJSON() bool { return b.plainJSON }

// JSONPlain reports whether encoding/json writes s into a string
// unchanged: printable ASCII other than the quote, the backslash and the
// three characters it escapes for HTML (<, >, &).
func JSONPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Counter returns the builder's token counter.
func (b *PromptBuilder) Counter() Counter { return b.tok }

// MaxPromptTokens is the longest prompt Prompt builds: 10,000,000 tokens,
// above any served context. A longer count is a fault in the workload, not
// a prompt: at about 7 bytes a token, 10^9 tokens would take 7 GB.
const MaxPromptTokens = 10_000_000

// ErrTooManyTokens is returned (wrapped) for a token count above
// MaxPromptTokens.
var ErrTooManyTokens = errors.New("above tokenize.MaxPromptTokens (10000000)")

// Prompt returns text of exactly tokens tokens, or an error wrapping
// ErrTooManyTokens for a count above MaxPromptTokens. Block i covers tokens
// [i·B, (i+1)·B) and is generated from blocks[i]; tokens past the given
// blocks (or all of them, when blocks is empty) are generated from seed, so
// give each request a distinct seed for text no other request shares.
func (b *PromptBuilder) Prompt(tokens int64, blocks []int64, seed uint64) (string, error) {
	if tokens > MaxPromptTokens {
		return "", fmt.Errorf("a prompt of %d tokens is %w", tokens, ErrTooManyTokens)
	}
	return b.build(int(tokens), blocks, seed), nil
}

// Build is Prompt for a count known to be at most MaxPromptTokens; it
// panics with an error wrapping ErrTooManyTokens above it.
func (b *PromptBuilder) Build(tokens int, blocks []int64, seed uint64) string {
	s, err := b.Prompt(int64(tokens), blocks, seed)
	if err != nil {
		panic(err)
	}
	return s
}

func (b *PromptBuilder) build(tokens int, blocks []int64, seed uint64) string {
	if tokens <= 0 {
		return ""
	}
	if tokens >= yieldWords {
		runtime.Gosched() // appendWords yields through the build; let the queue go first too
	}
	buf := make([]byte, 0, tokens*7+wordPad)
	written := 0
	for i := 0; written < tokens && i < len(blocks); i++ {
		n := min(b.blockSize, tokens-written)
		buf = b.appendWords(buf, written, n, uint64(blocks[i])^b.salt, 0x9e3779b97f4a7c15)
		written += n
	}
	if written < tokens {
		buf = b.appendWords(buf, written, tokens-written, seed^b.salt, 0xc2b2ae3d27d4eb4f)
	}
	// buf is not written after: the string shares its bytes, where a
	// copy of a long prompt took a tenth of its build. It keeps buf's
	// whole capacity alive (7 bytes a token against about 5.6 used).
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

// appendWords writes n space-prefixed single-token words drawn from a PCG
// stream keyed by (key, stream), the prompt holding written words before
// them. It yields the processor at every yieldWords-th word of the
// prompt, blocks and all: a goroutine queued behind a long build (a
// replay's send) then waits a fraction of a millisecond, not the whole
// build.
func (b *PromptBuilder) appendWords(buf []byte, written, n int, key, stream uint64) []byte {
	ws := b.wordStream(key, stream)
	var idx [512]uint16 // drawn first, then copied: two small loops the compiler keeps in registers
	for i := written; i < written+n; {
		if i > 0 && i%yieldWords == 0 {
			runtime.Gosched()
		}
		// Up to the next yield, the batch's end or the last word.
		k := min(written+n-i, len(idx), yieldWords-i%yieldWords)
		ws.draw(idx[:k])
		if need := k * wordPad; cap(buf)-len(buf) < need {
			buf = slices.Grow(buf, need+(written+n-i-k)*8)
		}
		for _, w := range idx[:k] {
			*(*[wordPad]byte)(buf[len(buf) : len(buf)+wordPad]) = b.padded[w]
			buf = buf[:len(buf)+int(b.spacedLen[w])]
		}
		i += k
	}
	return buf
}

// wordStream draws space-prefixed words: the words math/rand/v2's
// Rand.IntN draws over NewPCG(key, stream), as they always were. On a
// 64-bit platform it steps that generator itself, so the state stays in
// registers through a build where a *rand.PCG went to memory every word.
type wordStream struct {
	spaced []string
	hi, lo uint64     // rand.PCG's state
	m      uint64     // len(spaced)
	thresh uint64     // Lemire's rejection zone: a product's low half below it draws again
	odd    bool       // m is a power of two or the platform 32-bit: each draw goes to finish
	slow   *rand.Rand // on 32-bit platforms, where IntN draws differently
}

func (b *PromptBuilder) wordStream(key, stream uint64) wordStream {
	m := uint64(len(b.spaced))
	ws := wordStream{spaced: b.spaced, hi: key, lo: stream, m: m, thresh: -m % m, odd: m&(m-1) == 0}
	if strconv.IntSize == 32 {
		ws.slow, ws.odd = rand.New(rand.NewPCG(key, stream)), true
	}
	return ws
}

// draw fills idx with the next len(idx) word indices, Rand.IntN's draws
// with the generator's state in locals, which the loop keeps in registers.
func (ws *wordStream) draw(idx []uint16) {
	hi, lo, m, thresh := ws.hi, ws.lo, ws.m, ws.thresh
	for j := range idx {
		var x uint64
		hi, lo, x = pcgNext(hi, lo)
		w, l := bits.Mul64(x, m)
		if l < thresh || ws.odd {
			ws.hi, ws.lo = hi, lo
			w = uint64(ws.finish(w, l))
			hi, lo = ws.hi, ws.lo
		}
		idx[j] = uint16(w)
	}
	ws.hi, ws.lo = hi, lo
}

// uint64 is rand.PCG's Uint64.
func (ws *wordStream) uint64() uint64 {
	var x uint64
	ws.hi, ws.lo, x = pcgNext(ws.hi, ws.lo)
	return x
}

// pcgNext is rand.PCG's Uint64 on the state (hi, lo), as values so that
// a loop can keep them in registers: a 128-bit linear congruential step,
// then the DXSM output permutation, with math/rand/v2's constants. It
// returns the new state and the draw.
func pcgNext(hi, lo uint64) (uint64, uint64, uint64) {
	const (
		mulHi    = 2549297995355413924
		mulLo    = 4865540595714422341
		incHi    = 6364136223846793005
		incLo    = 1442695040888963407
		cheapMul = 0xda942042e4dd58b5
	)
	h, l := bits.Mul64(lo, mulLo)
	h += hi*mulLo + lo*mulHi
	l, c := bits.Add64(l, incLo, 0)
	h, _ = bits.Add64(h, incHi, c)
	x := h ^ h>>32
	x *= cheapMul
	x ^= x >> 48
	return h, l, x * (l | 1)
}

// finish completes a draw that draw's loop could not: on a 32-bit
// platform, Rand's own; for a power of two, the draw's low bits, as IntN
// masks it (the product holds the draw shifted left by log2 m); otherwise
// Lemire's rejection, drawing again while the product falls in its zone.
func (ws *wordStream) finish(hi, lo uint64) int {
	m := ws.m
	switch {
	case ws.slow != nil:
		return ws.slow.IntN(len(ws.spaced))
	case m&(m-1) == 0:
		return int(lo >> bits.TrailingZeros64(m) & (m - 1))
	}
	for lo < ws.thresh {
		hi, lo = bits.Mul64(ws.uint64(), m)
	}
	return int(hi)
}

// yieldWords is how many words a build writes between yields of its
// processor: a 128k-token prompt takes milliseconds to build, and a
// goroutine queued behind the build on the same processor (a replay's
// send) would otherwise wait for all of it; this many words take about a
// quarter of a millisecond.
const yieldWords = 8192

// SeedFor derives a seed for Build from a request id.
func SeedFor(requestID string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(requestID))
	return h.Sum64()
}

// Words returns count space-prefixed single-token words from seed, for
// generated completions; the result has exactly count tokens. A count above
// MaxPromptTokens gets MaxPromptTokens words.
func (b *PromptBuilder) Words(count int, seed uint64) []string {
	count = max(0, min(count, MaxPromptTokens))
	ws := b.wordStream(seed, 0x5851f42d4c957f2d)
	out := make([]string, count)
	var idx [512]uint16
	for i := 0; i < count; {
		k := min(count-i, len(idx))
		ws.draw(idx[:k])
		for _, w := range idx[:k] {
			out[i] = ws.spaced[w]
			i++
		}
	}
	return out
}
