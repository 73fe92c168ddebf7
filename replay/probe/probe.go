// Package probe builds and grades probe requests: requests whose correct
// answer servetrace can check exactly, without any dataset, so a load test
// can tell whether a server's answers stayed correct under load. A probe is
// either generated from a seed (copying words, arithmetic, sorting, reading
// a field of a JSON object) or read from a user's JSONL file.
//
// Nothing in this package logs or prints a probe's prompt or answer, and
// its errors name a probe by file and line, never by its text.
package probe

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// Kinds of probes: the four generated kinds, and KindUser for a probe read
// from a user's file. A run reports accuracy by kind, so that a server that
// fails one kind of task can be told from one that fails all.
const (
	KindCopy       = "copy"
	KindArithmetic = "arithmetic"
	KindSort       = "sort"
	KindJSONField  = "json-field"
	KindUser       = "user"
)

// Graders: how an answer is compared with a probe's Expect. Each grader is
// exact in what it compares and lenient only about the wrapping a chat model
// commonly puts around an answer, so that a correct answer is never graded
// wrong for its formatting nor a wrong one right.
const (
	// GraderExact: the answer, trimmed of surrounding white space and then,
	// if it has them, of a ``` fence (with its info string, such as
	// "json") and of one pair of surrounding quotes or backticks, equals
	// Expect trimmed of surrounding white space. A model that quotes or
	// fences a correct answer is right; any change inside it is wrong. The
	// empty Grader means GraderExact.
	GraderExact = "exact"
	// GraderRegex: Expect is an RE2 pattern (Go's regexp syntax) that
	// must match the whole answer trimmed of surrounding white space, not
	// merely a part of it, so that a pattern for "42" does not accept
	// "142". The pattern needs no ^ or $.
	GraderRegex = "regex"
	// GraderJSONField: the first JSON object in the answer (which may sit
	// inside a ``` fence or among text; only the first 1 MiB is searched)
	// has the field Field, a dotted path such as "a.b.c" (a part that is a
	// decimal number indexes an array), and its value equals Expect. A
	// string value equals Expect when its content does; any value equals
	// Expect when their canonical JSON texts are equal (object keys
	// sorted, no spaces, numbers as written: 5 and 5.0 differ), so the
	// number 5 and the string "5" both equal Expect 5. A model can answer
	// with any layout or key order and is graded on the value alone.
	GraderJSONField = "json-field"
)

// Probe is one probe request: the message to send and how to grade the
// answer. Neither Prompt nor Expect is ever logged or printed by this
// package.
type Probe struct {
	// Kind is one of the Kind constants.
	Kind string
	// Prompt is the user message to send.
	Prompt string
	// Expect is the correct answer, or for GraderRegex the pattern that
	// matches it.
	Expect string
	// Grader is one of the Grader constants ("" is GraderExact).
	Grader string
	// Field is the dotted path of the field to compare, for
	// GraderJSONField only.
	Field string
	// MaxTokens is the max_tokens to send: enough for a correct answer
	// with some slack, so a probe costs the server little yet is not cut
	// off.
	MaxTokens int

	// re is Expect compiled for GraderRegex by ReadFile (leftmost-longest,
	// see matchesWhole); Grade compiles Expect itself when re is nil or
	// was compiled from another pattern.
	re *regexp.Regexp
}

// Grade says whether answer is correct, by the probe's Grader. It never
// panics, whatever the answer holds; an unknown grader, a pattern that
// does not compile or passes the grading bounds, and an answer past
// MaxGradedAnswer (or past 64 KiB, trimmed, for a pattern) grade wrong,
// since nothing can be checked.
func (p Probe) Grade(answer string) bool {
	if len(answer) > MaxGradedAnswer {
		return false
	}
	switch p.Grader {
	case GraderExact, "":
		return gradeExact(p.Expect, answer)
	case GraderRegex:
		re := p.re
		if re == nil || re.String() != p.Expect {
			var err error
			if re, err = compileWhole(p.Expect); err != nil {
				return false
			}
		}
		answer = strings.TrimSpace(answer)
		return len(answer) <= maxRegexAnswer && matchesWhole(re, answer)
	case GraderJSONField:
		return gradeJSONField(p.Field, p.Expect, answer)
	}
	return false
}

// gradeExact compares answer with expect by GraderExact's rule. The answer
// is tried as it is (trimmed) before each wrapping is taken off, so an
// Expect that itself starts and ends with quotes is matched too.
func gradeExact(expect, answer string) bool {
	want := strings.TrimSpace(expect)
	s := strings.TrimSpace(answer)
	if s == want {
		return true
	}
	if inner, ok := unfence(s); ok {
		s = strings.TrimSpace(inner)
		if s == want {
			return true
		}
	}
	inner, ok := unquote(s)
	return ok && inner == want
}

// fence opens and closes a Markdown code block.
const fence = "```"

// unfence returns what is inside a ``` fence around the whole of s, less
// the info string ("json", "text") of the opening line; ok is false when
// s is not fenced.
func unfence(s string) (inner string, ok bool) {
	if len(s) < 2*len(fence) || !strings.HasPrefix(s, fence) || !strings.HasSuffix(s, fence) {
		return "", false
	}
	inner = s[len(fence) : len(s)-len(fence)]
	if strings.Contains(inner, fence) {
		return "", false // two blocks, or text between fences: not one answer
	}
	if _, body, found := strings.Cut(inner, "\n"); found {
		inner = body // the opening line holds only the info string
	}
	return inner, true
}

// quotePairs are the quotes a model puts around a short answer.
var quotePairs = [...][2]string{{`"`, `"`}, {`'`, `'`}, {"`", "`"}, {"\u201c", "\u201d"}, {"\u2018", "\u2019"}}

// unquote returns s without one pair of surrounding quotes or backticks;
// ok is false when s has none.
func unquote(s string) (inner string, ok bool) {
	for _, q := range quotePairs {
		if len(s) >= len(q[0])+len(q[1]) && strings.HasPrefix(s, q[0]) && strings.HasSuffix(s, q[1]) {
			return s[len(q[0]) : len(s)-len(q[1])], true
		}
	}
	return "", false
}

// Bounds on grading: the answer any grader reads, a regex grader's
// pattern, the instructions it compiles to and the answer it matches. Go's
// regexp matches in time proportional to the text times the program (a
// 900 KB pattern made five requests take 138 s), and a probe's answer is
// short: an answer past MaxGradedAnswer, or past maxRegexAnswer for a
// pattern, ran past any max_tokens a probe asks for (32,768 tokens) and
// is graded wrong, unread.
const (
	MaxGradedAnswer = 1 << 20
	maxRegexAnswer  = 64 << 10
	maxPatternBytes = 4 << 10
	maxPatternInsts = 2048
)

// patternTooBig is the error for a pattern past the grading bounds; it
// never quotes the pattern, a probe's answer.
type patternTooBig struct {
	bytes, insts int // insts is 0 for a pattern refused by its length
}

func (e *patternTooBig) Error() string {
	if e.insts == 0 {
		return fmt.Sprintf("is a pattern of %d bytes; a regex probe's may have at most %d", e.bytes, maxPatternBytes)
	}
	return fmt.Sprintf("compiles to %d instructions; a regex probe's pattern may compile to at most %d: simplify it (fewer or smaller repeats)", e.insts, maxPatternInsts)
}

// compileWhole compiles pattern for matchesWhole, within the grading
// bounds.
func compileWhole(pattern string) (*regexp.Regexp, error) {
	if len(pattern) > maxPatternBytes {
		return nil, &patternTooBig{bytes: len(pattern)}
	}
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil, err
	}
	if len(prog.Inst) > maxPatternInsts {
		return nil, &patternTooBig{bytes: len(pattern), insts: len(prog.Inst)}
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	re.Longest()
	return re, nil
}

// matchesWhole says whether re, compiled by compileWhole, matches the whole
// of s. Under leftmost-longest matching, a match of the whole string, if
// there is one, is the match found: it starts at the leftmost place and is
// the longest from there. This needs no wrapping of the user's pattern in
// anchors, which a pattern such as `a)|(b` or an unterminated \Q could
// escape.
func matchesWhole(re *regexp.Regexp, s string) bool {
	loc := re.FindStringIndex(s)
	return loc != nil && loc[0] == 0 && loc[1] == len(s)
}
