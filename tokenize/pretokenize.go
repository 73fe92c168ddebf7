package tokenize

import (
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
		return otherThenNewlines(text, j)
	case r0 == ' ' && r1 >= 0 && isOther(r1):
		_, w1 := utf8.DecodeRuneInString(text[j:])
		return otherThenNewlines(text, j+w1)
	}
	// r0 is whitespace: \s*[\r\n]+ ends after the run's last CR or LF;
	// \s+(?!\S) leaves the run's last space to the piece after it, unless
	// the text ends; \s+ takes a single space.
	end, lastNewline := i, -1
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
	switch {
	case lastNewline >= 0:
		return lastNewline
	case end == len(text):
		return end
	}
	_, wLast := utf8.DecodeLastRuneInString(text[:end])
	if end-wLast > i {
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

// letters returns the end of the run of letters starting at text[j].
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

// isOther reports whether r is neither a space, a letter nor a number:
// the class [^\s\p{L}\p{N}].
func isOther(r rune) bool {
	return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
}

// otherThenNewlines returns the end of [^\s\p{L}\p{N}]*[\r\n]* from j.
func otherThenNewlines(text string, j int) int {
	for j < len(text) {
		r, w := utf8.DecodeRuneInString(text[j:])
		if !isOther(r) {
			break
		}
		j += w
	}
	for j < len(text) && (text[j] == '\r' || text[j] == '\n') {
		j++
	}
	return j
}
