package tokenize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// cl100kPiece returns the end of the pre-tokenizer piece of cl100k_base
// (and Llama 3) that starts at text[i], i < len(text): the match of
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// as tiktoken-go's regexp engine (dlclark/regexp2) finds it: alternatives
// tried in order, \s as unicode.IsSpace, \p{L} and \p{N} as Go's unicode
// tables, and a byte that is not UTF-8 read as U+FFFD. Written out by
// hand because the backtracking engine spent about 2 µs a token; the
// differential tests hold it to the engine's pieces.
func cl100kPiece(text string, i int) int {
	r0, w0 := utf8.DecodeRuneInString(text[i:])
	if r0 == '\'' {
		if n := contraction(text[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	j := i + w0
	var r1 rune
	if j < len(text) {
		r1, _ = utf8.DecodeRuneInString(text[j:])
	} else {
		r1 = -1
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	switch {
	case unicode.IsLetter(r0):
		return letters(text, j)
	case r0 != '\r' && r0 != '\n' && !unicode.IsNumber(r0) && r1 >= 0 && unicode.IsLetter(r1):
		return letters(text, j)
	}
	// \p{N}{1,3}
	if unicode.IsNumber(r0) {
		for n := 1; n < 3 && j < len(text); n++ {
			r, w := utf8.DecodeRuneInString(text[j:])
			if !unicode.IsNumber(r) {
				break
			}
			j += w
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	switch {
	case isOther(r0):
		return otherThenTail(text, j, "\r\n")
	case r0 == ' ' && r1 >= 0 && isOther(r1):
		_, w1 := utf8.DecodeRuneInString(text[j:])
		return otherThenTail(text, j+w1, "\r\n")
	}
	// r0 is whitespace: \s*[\r\n]+ ends after the run's last CR or LF.
	end, lastNewline := spaceRun(text, i)
	if lastNewline >= 0 {
		return lastNewline
	}
	return spacePiece(text, i, end)
}

// spaceRun returns the end of the run of spaces from text[i], and the end
// of its last CR or LF (-1 if it has none).
func spaceRun(text string, i int) (end, lastNewline int) {
	end, lastNewline = i, -1
	for end < len(text) {
		r, w := utf8.DecodeRuneInString(text[end:])
		if !unicode.IsSpace(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNewline = end + w
		}
		end += w
	}
	return end, lastNewline
}

// spacePiece returns the end of the piece \s+(?!\S)|\s+ at text[i], whose
// run of spaces ends at end: the run's last space is left to the piece
// after it, unless the text ends there; a single space is a piece.
func spacePiece(text string, i, end int) int {
	if end == len(text) {
		return end
	}
	if _, wLast := utf8.DecodeLastRuneInString(text[:end]); end-wLast > i {
		return end - wLast
	}
	return end
}

// contraction returns the length of the contraction suffix that starts
// rest ('s, 't, 're, 've, 'm, 'll, 'd after the apostrophe, any case), 0 if
// none does.
func contraction(rest string) int {
	if rest == "" {
		return 0
	}
	switch lowerASCII(rest[0]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(rest) > 1 && lowerASCII(rest[1]) == 'e' {
			return 2
		}
	case 'l':
		if len(rest) > 1 && lowerASCII(rest[1]) == 'l' {
			return 2
		}
	}
	return 0
}

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// letters returns the end of the run of letters starting at text[j]. It is
// runOf written out: the hottest loop of cl100k_base, 10–15% of a prompt's
// count faster without the call through a function value.
func letters(text string, j int) int {
	for j < len(text) {
		r, w := utf8.DecodeRuneInString(text[j:])
		if !unicode.IsLetter(r) {
			break
		}
		j += w
	}
	return j
}

// runOf returns the end of the run of characters in the class from
// text[j].
func runOf(text string, j int, in func(rune) bool) int {
	for j < len(text) {
		r, w := utf8.DecodeRuneInString(text[j:])
		if !in(r) {
			break
		}
		j += w
	}
	return j
}

// isOther reports whether r is neither a space, a letter nor a number:
// the class [^\s\p{L}\p{N}].
func isOther(r rune) bool {
	return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
}

// otherThenTail returns the end of [^\s\p{L}\p{N}]*[tail]* from j, tail
// a set of ASCII bytes.
func otherThenTail(text string, j int, tail string) int {
	j = runOf(text, j, isOther)
	for j < len(text) && strings.IndexByte(tail, text[j]) >= 0 {
		j++
	}
	return j
}

// o200kPiece returns the end of the pre-tokenizer piece of o200k_base
// that starts at text[i], i < len(text): the match of
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// as regexp2 finds it (see cl100kPiece). Its words are a run of "upper"
// letters (Lu, Lt, Lm, Lo and marks) then of "lower" ones (Ll, Lm, Lo and
// marks), with a contraction kept on the word.
func o200kPiece(text string, i int) int {
	r0, w0 := utf8.DecodeRuneInString(text[i:])
	prefixed := r0 != '\r' && r0 != '\n' && !unicode.IsLetter(r0) && !unicode.IsNumber(r0)
	// The first two alternatives, each with its prefix tried first.
	if prefixed {
		if end := upperThenLower(text, i+w0); end > 0 {
			return withContraction(text, end)
		}
	}
	if end := upperThenLower(text, i); end > 0 {
		return withContraction(text, end)
	}
	if prefixed {
		if end := upperRunThenLower(text, i+w0); end > 0 {
			return withContraction(text, end)
		}
	}
	if end := upperRunThenLower(text, i); end > 0 {
		return withContraction(text, end)
	}
	if unicode.IsNumber(r0) {
		return cl100kPiece(text, i)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n/]*': other characters, then newlines and
	// slashes (a slash after a newline).
	j := i + w0
	switch {
	case isOther(r0):
		return otherThenTail(text, j, "\r\n/")
	case r0 == ' ' && j < len(text):
		if r1, w1 := utf8.DecodeRuneInString(text[j:]); isOther(r1) {
			return otherThenTail(text, j+w1, "\r\n/")
		}
	}
	// Spaces, as cl100k_base splits them.
	return cl100kPiece(text, i)
}

// isUpperish and isLowerish are o200k_base's two letter classes (ASCII
// answered first: the tables are searched otherwise).
func isUpperish(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func isLowerish(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// upperThenLower matches [U]*[L]+ at j (U, L: isUpperish, isLowerish) and
// returns its end, 0 when it does not match. The upper run is greedy and
// gives back characters until a lower one can follow: the match ends after
// the last lowerish character of the upper run, or runs on through the
// lower run after it.
func upperThenLower(text string, j int) int {
	k, lastLower := j, -1
	for k < len(text) {
		r, w := utf8.DecodeRuneInString(text[k:])
		if !isUpperish(r) {
			break
		}
		k += w
		if isLowerish(r) {
			lastLower = k
		}
	}
	if k < len(text) {
		if r, _ := utf8.DecodeRuneInString(text[k:]); isLowerish(r) {
			return lowerRun(text, k)
		}
	}
	return max(lastLower, 0)
}

// upperRunThenLower matches [U]+[L]* at j and returns its end, 0 when it
// does not match.
func upperRunThenLower(text string, j int) int {
	k := j
	for k < len(text) {
		r, w := utf8.DecodeRuneInString(text[k:])
		if !isUpperish(r) {
			break
		}
		k += w
	}
	if k == j {
		return 0
	}
	return lowerRun(text, k)
}

// lowerRun returns the end of the run of lowerish characters from k.
func lowerRun(text string, k int) int { return runOf(text, k, isLowerish) }

// withContraction extends a word ending at end by the contraction after
// it, if one follows.
func withContraction(text string, end int) int {
	if end < len(text) && text[end] == '\'' {
		if n := contraction(text[end+1:]); n > 0 {
			return end + 1 + n
		}
	}
	return end
}

// p50kPiece returns the end of the pre-tokenizer piece of p50k_base that
// starts at text[i], i < len(text): the match of
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// as regexp2 finds it (see cl100kPiece): contractions in lower case only,
// and a space kept on the run of one class after it.
func p50kPiece(text string, i int) int {
	if text[i] == '\'' {
		if n := lowerContraction(text[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	r0, w0 := utf8.DecodeRuneInString(text[i:])
	j := i + w0
	// The class of the run: r0's, or after a space the next character's.
	r := r0
	if r0 == ' ' && j < len(text) {
		if r1, w1 := utf8.DecodeRuneInString(text[j:]); !unicode.IsSpace(r1) {
			r, j = r1, j+w1
		}
	}
	var in func(rune) bool
	switch {
	case unicode.IsLetter(r):
		in = unicode.IsLetter
	case unicode.IsNumber(r):
		in = unicode.IsNumber
	case isOther(r):
		in = isOther
	}
	if in != nil {
		return runOf(text, j, in)
	}
	// Spaces, with no rule for newlines.
	end, _ := spaceRun(text, i)
	return spacePiece(text, i, end)
}

// lowerContraction is contraction in lower case only.
func lowerContraction(rest string) int {
	n := contraction(rest)
	for k := range n {
		if 'A' <= rest[k] && rest[k] <= 'Z' {
			return 0
		}
	}
	return n
}
