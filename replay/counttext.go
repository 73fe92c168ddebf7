package replay

import (
	"unicode/utf8"

	"github.com/servetrace/servetrace/tokenize"
)

// Counting text a server returned (a session's or a graph's reply) or a
// user gave (a probe's prompt): a byte-pair encoder's cost grows with the
// square of a word's length, and such text may hold one word of a
// megabyte. countText hands the counter pieces of at most countPiece
// bytes, cut before a space, and cuts a word at maxCountWord bytes; a cut
// inside a word moves the count by a token or so, a cut before a space
// by none, since the encoders start a word at its leading space.
const (
	countPiece   = 4 << 10
	maxCountWord = 256
)

// countText counts s with c, in pieces (see countPiece); a server's
// /tokenize counts it whole, in one request.
func countText(c tokenize.Counter, s string) int64 {
	if _, remote := c.(*serverCounter); remote || len(s) <= maxCountWord {
		return int64(max(0, c.Count(s)))
	}
	var n int64
	start, word, space := 0, 0, -1
	cut := func(at int) {
		n += int64(max(0, c.Count(s[start:at])))
		start = at
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b == ' ' || b == '\n' || b == '\t' || b == '\r' {
			word = 0
			if i > start {
				space = i
			}
		} else if word++; word > maxCountWord && utf8.RuneStart(b) {
			cut(i)
			word, space = 1, -1
		}
		if i+1-start >= countPiece {
			if space > start {
				cut(space)
			} else {
				for at := i + 1; at > start; at-- {
					if at == len(s) || utf8.RuneStart(s[at]) {
						cut(at)
						break
					}
				}
			}
			space = -1
		}
	}
	if start < len(s) {
		cut(len(s))
	}
	return n
}
