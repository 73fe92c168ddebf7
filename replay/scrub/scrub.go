// Package scrub removes secrets from what a run writes or prints: an API
// key, header values and URL credentials, whole, in part, spaced out or
// base64-encoded, and request text a server's error message copied.
package scrub

import (
	"bytes"
	"encoding/base64"
	"strings"

	"github.com/servetrace/servetrace/internal/opterr"
)

// Servers put surprising things in what they send back: a validation error
// can echo the whole request body (FastAPI's 422 lists each invalid field
// with its "input"), a gateway can quote the key it refused, in part,
// base64-encoded (a Basic credential) or spaced out, and a /v1/models answer
// or a Server header can echo the request's headers. Whatever of it a run
// writes or prints first passes through one Scrubber.

const (
	// minCopiedText is the shortest run of an error message, copied from
	// the request body, that is removed: long enough that field names and
	// numbers are kept, short enough that no sentence of a prompt survives.
	minCopiedText = 16
	// longSecret is the length from which any minSecretRun-byte run copied
	// from a secret is removed (a gateway may quote part of a key); a
	// shorter secret is removed only whole, and only as a word of its own
	// (not glued by - or . into a name such as llama-3.1-8b), since its
	// fragments could not be told from words.
	longSecret   = 8
	minSecretRun = 4
	// minSpacedRun is the shortest run of a secret's letters and digits,
	// with other characters between them ("s k - l i v e"), that is removed
	// (the whole secret, if it has fewer).
	minSpacedRun = 8
	// minEncodedRun is the shortest run of a secret whose base64 encoding
	// in a run of base64 characters has the whole run removed (the whole
	// secret, if it is shorter): 6 bytes are at least 7 characters that
	// the secret alone decides, so ordinary words match by chance
	// negligibly often.
	minEncodedRun = 6
	// minEncodedSecret is the shortest secret looked for in base64 at all:
	// shorter ones decide too few characters to tell from words.
	minEncodedSecret = 4

	redactedLabel = "<redacted>"
	requestLabel  = "<request text>"
)

// Scrubber removes secrets from text: raw copies of one, in whole or in part,
// spaced-out copies, base64-encoded copies (standard or URL alphabet,
// padded or not, at any alignment), and credentials and query values of
// URLs in the text (URLs). A part of a secret that is only a few
// digits (fewer than longSecret) is left: server text is full of numbers
// (a metrics scrape would lose its values), and they tell little of a key.
// It is safe for concurrent use. A nil Scrubber only redacts URLs.
type Scrubber struct {
	long, short [][]byte            // secrets of at least longSecret bytes, and shorter
	grams       map[string]struct{} // every minSecretRun-byte window of the long secrets
	skeletons   [][]byte            // each secret's letters and digits
	spacedGrams grams               // the skeletons' windows a spaced copy starts with
	encoded     grams               // the base64 cores of the secrets' windows (base64Cores)
}

// grams holds byte windows of a few lengths: a quick test of whether a
// position can start a copy, before the exact (slower) search.
type grams []gramSet

type gramSet struct {
	n   int
	set map[string]struct{}
}

// add adds every n-byte window of b.
func (g *grams) add(b []byte, n int) {
	for i := 0; i+n <= len(b); i++ {
		g.addOne(b[i : i+n])
	}
}

// addOne adds w.
func (g *grams) addOne(w []byte) {
	for k := range *g {
		if (*g)[k].n == len(w) {
			(*g)[k].set[string(w)] = struct{}{}
			return
		}
	}
	*g = append(*g, gramSet{n: len(w), set: map[string]struct{}{string(w): {}}})
}

// at reports whether some window starts at b[i].
func (g grams) at(b []byte, i int) bool {
	for _, gs := range g {
		if i+gs.n <= len(b) {
			if _, ok := gs.set[string(b[i:i+gs.n])]; ok {
				return true
			}
		}
	}
	return false
}

// New returns a scrubber for the given secrets (empty ones are
// ignored).
func New(secrets ...string) *Scrubber {
	s := &Scrubber{grams: map[string]struct{}{}}
	for _, sec := range secrets {
		b := []byte(sec)
		switch {
		case len(b) == 0:
			continue
		case len(b) >= longSecret:
			s.long = append(s.long, b)
			for i := 0; i+minSecretRun <= len(b); i++ {
				s.grams[string(b[i:i+minSecretRun])] = struct{}{}
			}
		default:
			s.short = append(s.short, b)
		}
		if sk := skeleton(b); len(sk) >= 2 {
			s.skeletons = append(s.skeletons, sk)
			s.spacedGrams.add(sk, min(minSpacedRun, len(sk)))
		}
		if len(b) >= minEncodedSecret {
			n := min(minEncodedRun, len(b))
			for i := 0; i+n <= len(b); i++ {
				for _, e := range base64Cores(b[i : i+n]) {
					s.encoded.addOne(e)
				}
			}
		}
	}
	return s
}

// Scrub returns text with URLs redacted and every copy of a secret replaced
// by "<redacted>". Invalid UTF-8 a cut left behind is dropped.
func (s *Scrubber) Scrub(text string) string {
	text = URLs(text)
	if s == nil || len(s.long)+len(s.short) == 0 {
		return text
	}
	out := s.raw(text)
	out = s.whole(out)
	out = s.spaced(out)
	out = s.base64(out)
	if out == text {
		return text
	}
	return strings.ToValidUTF8(out, "")
}

// scrubChunk is the most ScrubLines scrubs at once: its working memory is
// a few times the text's length.
const scrubChunk = 1 << 20

// ScrubLines scrubs a long text (a metrics exposition) in pieces of about
// scrubChunk bytes, cut after a line end; a copy that spans a cut is
// missed.
func (s *Scrubber) ScrubLines(text string) string {
	if len(text) <= scrubChunk {
		return s.Scrub(text)
	}
	var out strings.Builder
	for len(text) > 0 {
		n := min(len(text), scrubChunk)
		if n < len(text) {
			if i := strings.LastIndexByte(text[:n], '\n'); i > 0 {
				n = i + 1
			}
		}
		out.WriteString(s.Scrub(text[:n]))
		text = text[n:]
	}
	return out.String()
}

// ScrubJSON returns v, a decoded JSON value, with every string in it (keys
// too) scrubbed.
func (s *Scrubber) ScrubJSON(v any) any {
	switch x := v.(type) {
	case string:
		return s.Scrub(x)
	case []any:
		for i := range x {
			x[i] = s.ScrubJSON(x[i])
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[s.Scrub(k)] = s.ScrubJSON(e)
		}
		return out
	}
	return v
}

// raw removes every maximal run of at least minSecretRun bytes copied from
// a long secret, but a run of fewer than longSecret digits.
func (s *Scrubber) raw(text string) string {
	if len(s.long) == 0 || len(text) < minSecretRun {
		return text
	}
	var out strings.Builder
	last := 0
	for i := 0; i+minSecretRun <= len(text); {
		if _, hit := s.grams[text[i:i+minSecretRun]]; !hit {
			i++
			continue
		}
		j := i + minSecretRun
		for j < len(text) && s.inLong(text[i:j+1]) {
			j++
		}
		if j-i < longSecret && allDigits(text[i:j]) {
			i++ // a short number: numbers abound in server text, and a few digits tell little of a key
			continue
		}
		out.WriteString(text[last:i])
		out.WriteString(redactedLabel)
		i, last = j, j
	}
	if last == 0 {
		return text
	}
	out.WriteString(text[last:])
	return out.String()
}

func (s *Scrubber) inLong(run string) bool {
	for _, sec := range s.long {
		if bytes.Contains(sec, []byte(run)) {
			return true
		}
	}
	return false
}

// whole removes each short secret where it stands as a word of its own.
func (s *Scrubber) whole(text string) string {
	for _, sec := range s.short {
		var out strings.Builder
		last := 0
		for i := 0; ; {
			k := strings.Index(text[i:], string(sec))
			if k < 0 {
				break
			}
			at, end := i+k, i+k+len(sec)
			if (!gluedBefore(text, at) || !isWordByte(sec[0])) && (!gluedAfter(text, end) || !isWordByte(sec[len(sec)-1])) {
				out.WriteString(text[last:at])
				out.WriteString(redactedLabel)
				last = end
			}
			i = at + 1
		}
		if last > 0 {
			out.WriteString(text[last:])
			text = out.String()
		}
	}
	return text
}

// gluedBefore reports whether what precedes text[at] joins it into a
// longer word or name: a word byte, or a - or . after one ("llama-3",
// "0.3"). A short secret is a value of its own only where it is not
// glued: a header value of "3" must not take the digit out of every
// model name and version.
func gluedBefore(text string, at int) bool {
	if at == 0 {
		return false
	}
	c := text[at-1]
	return isWordByte(c) || (c == '-' || c == '.') && at >= 2 && isWordByte(text[at-2])
}

// gluedAfter is gluedBefore for what follows text[:end].
func gluedAfter(text string, end int) bool {
	if end == len(text) {
		return false
	}
	c := text[end]
	return isWordByte(c) || (c == '-' || c == '.') && end+1 < len(text) && isWordByte(text[end+1])
}

func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// skeleton returns b's ASCII letters and digits.
func skeleton(b []byte) []byte {
	var out []byte
	for _, c := range b {
		if isAlnum(c) {
			out = append(out, c)
		}
	}
	return out
}

// spaced removes copies of a secret with other characters (spaces,
// punctuation) put between its letters and digits: a run of at least
// minSpacedRun of a secret's letters and digits in a row, or all of a
// shorter one's, among the text's letters and digits, that has such
// characters inside it. A short secret's copy must also stand as a word.
func (s *Scrubber) spaced(text string) string {
	if len(s.skeletons) == 0 {
		return text
	}
	var sk []byte
	var pos []int32 // pos[k]: the index in text of sk[k]
	for i := 0; i < len(text); i++ {
		if isAlnum(text[i]) {
			sk = append(sk, text[i])
			pos = append(pos, int32(i))
		}
	}
	type span struct{ from, to int } // text[from:to] is removed
	var cut []span
	for k := 0; k < len(sk); {
		if !s.spacedGrams.at(sk, k) {
			k++
			continue
		}
		best, bestSpan := 0, span{}
		for _, sec := range s.skeletons {
			need := min(minSpacedRun, len(sec))
			if k+need > len(sk) || !bytes.Contains(sec, sk[k:k+need]) {
				continue
			}
			n := need
			for k+n < len(sk) && bytes.Contains(sec, sk[k:k+n+1]) {
				n++
			}
			from, to := int(pos[k]), int(pos[k+n-1])+1
			if to-from == n {
				continue // nothing between: a raw copy, or a word
			}
			if n < len(sec) && allDigits(string(sk[k:k+n])) {
				continue // numbers with separators ("12,345 678") abound
			}
			if len(sec) < minSpacedRun && ((from > 0 && isAlnum(text[from-1])) || (to < len(text) && isAlnum(text[to]))) {
				continue
			}
			if n > best {
				best, bestSpan = n, span{from, to}
			}
		}
		if best == 0 {
			k++
			continue
		}
		cut = append(cut, bestSpan)
		k += best
	}
	if len(cut) == 0 {
		return text
	}
	var out strings.Builder
	last := 0
	for _, c := range cut {
		out.WriteString(text[last:c.from])
		out.WriteString(redactedLabel)
		last = c.to
	}
	out.WriteString(text[last:])
	return out.String()
}

func isBase64Byte(c byte) bool {
	return isAlnum(c) || c == '+' || c == '/' || c == '-' || c == '_'
}

// base64Cores returns the base64 characters (standard alphabet) that w
// alone decides when it is encoded after 0, 1 or 2 other bytes: any
// encoding of a text holding w holds one of them, whatever the bytes
// around it.
func base64Cores(w []byte) [][]byte {
	var out [][]byte
	for a := range 3 {
		buf := make([]byte, a+len(w))
		copy(buf[a:], w)
		enc := base64.RawStdEncoding.EncodeToString(buf)
		// Character k holds bits [6k, 6k+6); w's are [8a, 8(a+len(w))).
		first, last := (8*a+5)/6, 8*(a+len(w))/6
		if last > first {
			out = append(out, []byte(enc[first:last]))
		}
	}
	return out
}

// base64 removes every run of base64 characters (either alphabet, with its
// padding) that holds the encoding of a run of at least minEncodedRun bytes
// of a secret, or all of a shorter one, at any alignment.
func (s *Scrubber) base64(text string) string {
	if len(s.encoded) == 0 {
		return text
	}
	var out strings.Builder
	last := 0
	var norm []byte
	for i := 0; i < len(text); {
		if !isBase64Byte(text[i]) {
			i++
			continue
		}
		j := i
		for j < len(text) && isBase64Byte(text[j]) {
			j++
		}
		end := j
		for end < len(text) && text[end] == '=' {
			end++
		}
		if j-i >= 4 {
			norm = append(norm[:0], text[i:j]...)
			for k, c := range norm {
				switch c {
				case '-':
					norm[k] = '+'
				case '_':
					norm[k] = '/'
				}
			}
			hit := false
			for k := 0; k < len(norm) && !hit; k++ {
				hit = s.encoded.at(norm, k)
			}
			if hit {
				out.WriteString(text[last:i])
				out.WriteString(redactedLabel)
				last = end
			}
		}
		i = end
	}
	if last == 0 {
		return text
	}
	out.WriteString(text[last:])
	return out.String()
}

// Message returns msg scrubbed of secrets, with every run of at least
// minCopiedText bytes copied from the request body replaced by
// "<request text>".
func Message(msg string, body []byte, s *Scrubber) string {
	msg = s.Scrub(msg)
	return redactCopies(msg, body, minCopiedText, requestLabel)
}

// redactCopies replaces each run of msg made of windows of at least minRun
// bytes, each found in src, with label. It hashes msg's windows and rolls
// a hash over src once, so a long request body costs one pass, not one
// search per byte of the message.
func redactCopies(msg string, src []byte, minRun int, label string) string {
	if len(src) < minRun || len(msg) < minRun {
		return msg
	}
	const prime = 1099511628211 // any odd multiplier; arithmetic wraps mod 2^64
	pow := uint64(1)            // prime^(minRun-1)
	for range minRun - 1 {
		pow *= prime
	}
	hash := func(b string) uint64 {
		var h uint64
		for k := 0; k < len(b); k++ {
			h = h*prime + uint64(b[k])
		}
		return h
	}
	starts := map[uint64][]int{} // window hash -> its starts in msg
	var filter [1 << 10]uint64   // a 65,536-bit filter of those hashes
	for i := 0; i+minRun <= len(msg); i++ {
		h := hash(msg[i : i+minRun])
		starts[h] = append(starts[h], i)
		filter[h>>54] |= 1 << (h >> 48 & 63)
	}
	found := make([]bool, len(msg)-minRun+1)
	h := hash(string(src[:minRun]))
	for p := 0; ; p++ {
		if filter[h>>54]&(1<<(h>>48&63)) != 0 {
			for _, i := range starts[h] {
				if !found[i] && msg[i:i+minRun] == string(src[p:p+minRun]) {
					found[i] = true
				}
			}
		}
		if p+minRun >= len(src) {
			break
		}
		h = (h-uint64(src[p])*pow)*prime + uint64(src[p+minRun])
	}
	var out strings.Builder
	last := 0
	for i := 0; i < len(found); i++ {
		if !found[i] {
			continue
		}
		end := i + minRun
		for k := i + 1; k < end && k < len(found); k++ {
			if found[k] {
				end = max(end, k+minRun)
			}
		}
		out.WriteString(msg[last:i])
		out.WriteString(label)
		last, i = end, end-1
	}
	if last == 0 {
		return msg
	}
	out.WriteString(msg[last:])
	return strings.ToValidUTF8(out.String(), "")
}

// scrubbed is an error whose message was scrubbed; it unwraps to the
// original, for errors.Is and errors.As, but prints only the scrubbed text.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// Err returns err with its message scrubbed, or err itself when
// there was nothing to scrub. An *opterr.Error in its chain is scrubbed in
// place, since a caller reads its Value and Reason.
func Err(err error, s *Scrubber) error {
	if oe, ok := opterr.As(err); ok {
		oe.Value, oe.Reason = s.Scrub(oe.Value), s.Scrub(oe.Reason)
	}
	if msg := s.Scrub(err.Error()); msg != err.Error() {
		return &scrubbed{msg: msg, err: err}
	}
	return err
}
