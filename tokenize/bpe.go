package tokenize

import (
	"math"
	"slices"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
)

// encoder turns text into token ids, special-token strings as ordinary
// text.
type encoder interface {
	appendTokens(dst []int, text string) []int
	count(text string) int
}

// regexpEncoder is tiktoken-go's encoding, for a rank file whose
// pre-tokenizer pattern is not Llama 3's.
type regexpEncoder struct{ enc *tiktoken.Tiktoken }

func (e regexpEncoder) appendTokens(dst []int, text string) []int {
	for len(text) > 0 {
		var part string
		part, text = cutLongRun(text)
		dst = append(dst, e.enc.EncodeOrdinary(part)...)
	}
	return dst
}

func (e regexpEncoder) count(text string) int {
	n := 0
	for len(text) > 0 {
		var part string
		part, text = cutLongRun(text)
		n += len(e.enc.EncodeOrdinary(part))
	}
	return n
}

// maxRegexpRun bounds the run of non-space bytes tiktoken-go merges at
// once: its merge costs the square of a piece's length, so a word of
// megabytes from a hostile log or server would take hours. Text without
// such a run is encoded whole, exactly; one with it is cut inside the
// run, every maxRegexpRun bytes at a character, its tokens then differing
// from tiktoken's by one or two at each cut.
const maxRegexpRun = 4 << 10

// cutLongRun splits off text's first part to encode: up to the cut inside
// its first run of more than maxRegexpRun non-space bytes, or all of it.
func cutLongRun(text string) (part, rest string) {
	run := 0
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			run = 0
			continue
		}
		if run++; run > maxRegexpRun && utf8.RuneStart(text[i]) {
			return text[:i], text[i:]
		}
	}
	return text, ""
}

// bpeEncoder is a byte-level BPE over ranks after a hand-written
// pre-tokenizer (piece: cl100kPiece, which Llama 3's rank files share,
// o200kPiece or p50kPiece): the same ids as tiktoken-go's EncodeOrdinary,
// many times faster.
type bpeEncoder struct {
	ranks map[string]int
	piece func(text string, i int) int // the end of the piece at text[i]
}

func (e bpeEncoder) appendTokens(dst []int, text string) []int {
	var m merger
	for i := 0; i < len(text); {
		end := e.piece(text, i)
		piece := asRunes(text[i:end])
		i = end
		if id, ok := e.ranks[piece]; ok {
			dst = append(dst, id)
			continue
		}
		for len(piece) > 0 {
			var part string
			part, piece = cutPiece(piece)
			starts := m.merge(e.ranks, part)
			for k := 0; k+1 < len(starts); k++ {
				dst = append(dst, e.ranks[part[starts[k]:starts[k+1]]])
			}
		}
	}
	return dst
}

// count is appendTokens without the ids. It repeats its loop: one loop for
// both, the ids appended through a pointer unless nil, made a 32k-token
// prompt's count 7–12% slower.
func (e bpeEncoder) count(text string) int {
	var m merger
	n := 0
	for i := 0; i < len(text); {
		end := e.piece(text, i)
		piece := asRunes(text[i:end])
		i = end
		if _, ok := e.ranks[piece]; ok {
			n++
			continue
		}
		for len(piece) > 0 {
			var part string
			part, piece = cutPiece(piece)
			n += len(m.merge(e.ranks, part)) - 1
		}
	}
	return n
}

// maxMergePiece bounds the piece one merge joins: a longer one (a word of
// megabytes, which no prose holds but a hostile log or server can send)
// is merged in parts of this length, cut at a character, so that a merge
// holds a few MiB whatever the text; its tokens may then differ from
// tiktoken's by one or two at each cut.
const maxMergePiece = 64 << 10

// cutPiece splits off piece's first part to merge: all of it within
// maxMergePiece, else its first maxMergePiece bytes back to a character
// boundary.
func cutPiece(piece string) (part, rest string) {
	if len(piece) <= maxMergePiece {
		return piece, ""
	}
	cut := maxMergePiece
	for cut > maxMergePiece-utf8.UTFMax && !utf8.RuneStart(piece[cut]) {
		cut--
	}
	return piece[:cut], piece[cut:]
}

// noRank marks two neighbouring parts that no rank joins.
const noRank = math.MaxInt

// merger byte-pair merges pieces, its slices kept from one piece to the
// next.
type merger struct {
	starts []int // the parts' start offsets, and the piece's length last
	pair   []int // pair[k]: the rank of parts k and k+1 joined, or noRank
}

// merge returns the start offsets of piece's tokens, and len(piece) last:
// while some two neighbouring parts join into a ranked token, the pair of
// the lowest rank (the leftmost of equals) is joined, starting from single
// bytes. The result is valid until the next call.
func (m *merger) merge(ranks map[string]int, piece string) []int {
	if len(piece) > longPiece {
		return m.mergeLong(ranks, piece)
	}
	m.starts, m.pair = m.starts[:0], m.pair[:0]
	for i := range len(piece) + 1 {
		m.starts = append(m.starts, i)
	}
	for k := range len(piece) - 1 {
		m.pair = append(m.pair, m.rank(ranks, piece, k))
	}
	for len(m.pair) > 0 {
		best, at := noRank, -1
		for k, r := range m.pair {
			if r < best {
				best, at = r, k
			}
		}
		if at < 0 {
			break
		}
		// Parts at and at+1 become one: its pairs with the parts either
		// side are ranked again.
		m.starts = slices.Delete(m.starts, at+1, at+2)
		m.pair = slices.Delete(m.pair, at, at+1)
		if at < len(m.pair) {
			m.pair[at] = m.rank(ranks, piece, at)
		}
		if at > 0 {
			m.pair[at-1] = m.rank(ranks, piece, at-1)
		}
	}
	return m.starts
}

// rank is the rank of parts k and k+1 joined, noRank if none.
func (m *merger) rank(ranks map[string]int, piece string, k int) int {
	if r, ok := ranks[piece[m.starts[k]:m.starts[k+2]]]; ok {
		return r
	}
	return noRank
}

// asRunes is text with each byte that is not UTF-8 replaced by U+FFFD, as
// tiktoken-go's pieces are (it cuts them from the text's runes).
func asRunes(text string) string {
	if utf8.ValidString(text) {
		return text
	}
	b := make([]byte, 0, len(text)+8)
	for _, r := range text {
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}
